"""The CPU kernel for products with few rows (specsample.kernels.small_k).

It must give XLA's product to float32 rounding for every shape it takes (row counts 1..64,
tails of the 8- and 16-float vectors, leading axes, thread splits), hand everything else to
XLA, differentiate like a product, and leave the models' outputs unchanged, with the kernels
of each instruction set the CPU can run (AVX-512 and AVX2 + FMA: the `isa` fixture picks
them in turn (conftest.py), as SPECSAMPLE_SMALL_K_ISA does when the kernel is loaded).
"""

from __future__ import annotations

import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specsample.kernels import native, small_k

CPU_ISAS = native.supported_instruction_sets()  # () when the extension is not built

requires_kernel = pytest.mark.skipif(
  native.why_not_available() == native.CPU_LACKS_ISA, reason=native.CPU_LACKS_ISA
)


def _jit(function):
  # A new function each time: jit caches traces by function, and the choice of kernel or
  # XLA is made while tracing.
  return jax.jit(lambda *a: function(*a))


def _close(actual, x, w_dn):
  """|actual - x @ w| within float32 rounding of a d-term sum, against float64."""
  expected = np.asarray(x, np.float64) @ np.asarray(w_dn, np.float64)
  scale = np.abs(np.asarray(x, np.float64)) @ np.abs(np.asarray(w_dn, np.float64)) + 1e-30
  error = np.abs(np.asarray(actual, np.float64) - expected) / scale
  assert error.max() < 1e-6 * max(1, x.shape[-1]) ** 0.5, error.max()


def _hlo(function, *args) -> str:
  return _jit(function).lower(*args).as_text()


@requires_kernel
def test_kernel_is_built_here(monkeypatch):
  # CI builds it (pip install -e . compiles setup.py's extension); a silent fallback to XLA
  # would leave every other test here testing XLA against itself.
  assert native.kernel_available(), native.why_not_available()
  monkeypatch.delenv(native.ISA_VARIABLE, raising=False)
  native.choose_again()
  try:
    assert native.instruction_set() == CPU_ISAS[0]  # the best this CPU has
  finally:
    monkeypatch.undo()
    native.choose_again()


@requires_kernel
def test_the_instruction_set_variable_is_read_when_the_kernel_is_loaded():
  # A process started with SPECSAMPLE_SMALL_K_ISA=avx2 runs the AVX2 kernels (also on an
  # AVX-512 CPU), from the first product on.
  script = (
    "import numpy as np, jax\n"
    "from specsample.kernels import native, small_k\n"
    "x, w = np.ones((5, 40), np.float32), np.ones((40, 24), np.float32)\n"
    "assert np.array_equal(jax.jit(small_k.matmul)(x, w), x @ w)\n"
    "print(native.instruction_set(), native.supported_instruction_sets())\n"
  )
  env = {**os.environ, native.ISA_VARIABLE: "avx2"}
  env.pop(native.ENV_VARIABLE, None)
  done = subprocess.run(
    [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
  )
  assert done.returncode == 0, done.stderr
  assert done.stdout.split()[0] == "avx2", done.stdout


@requires_kernel
def test_the_instruction_set_variable_refuses_what_it_cannot_give(monkeypatch):
  try:
    monkeypatch.setenv(native.ISA_VARIABLE, "sse2")
    native.choose_again()
    with pytest.raises(ValueError, match="SPECSAMPLE_SMALL_K_ISA='sse2'"):
      native.kernel_available()
    for value in ("", "auto"):
      monkeypatch.setenv(native.ISA_VARIABLE, value)
      native.choose_again()
      assert native.instruction_set() == CPU_ISAS[0]
    if "avx512f" not in CPU_ISAS:  # insisting on AVX-512 leaves every product to XLA
      monkeypatch.setenv(native.ISA_VARIABLE, "avx512f")
      native.choose_again()
      assert not native.kernel_available()
      assert "SPECSAMPLE_SMALL_K_ISA=avx512f" in native.why_not_available()
      x, w = np.ones((3, 8), np.float32), np.ones((8, 5), np.float32)
      assert "specsample_small_k" not in _hlo(small_k.matmul, x, w)
  finally:
    monkeypatch.undo()
    native.choose_again()
    native.kernel_available()


@requires_kernel
def test_the_handlers_refuse_to_run_without_an_instruction_set():
  # Programs compiled with the kernel and run after the kernels were switched off (an
  # instruction set the CPU lacks) fail with an error instead of running unknown code.
  x, w = np.ones((3, 8), np.float32), np.ones((8, 5), np.float32)
  product = _jit(small_k.matmul)
  np.testing.assert_array_equal(product(x, w), x @ w)
  library = native.library()  # the one the kernels registered from
  try:
    assert library.SpecsampleSmallKMatmulUseIsa(99) == 0  # no such instruction set
    # (XLA reports the handler's UNIMPLEMENTED error as a ValueError)
    with pytest.raises((ValueError, jax.errors.JaxRuntimeError), match="no AVX-512 or AVX2"):
      jax.block_until_ready(product(x, w))
  finally:
    native.choose_again()
    native.kernel_available()  # the process's own choice again
  np.testing.assert_array_equal(product(x, w), x @ w)


@pytest.mark.parametrize("rows", [*range(1, 18), 20, 31, 32, 33, 48, 56, 57, 64])
def test_matmul_matches_product_for_every_row_count(rows, isa):
  rng = np.random.default_rng(rows)
  # n = 203: whole panels of every width, single vectors and a tail (of 11 floats of 16, 3
  # of 8); d = 300 rows of w, and the tail of the transposed kernel's rows (12 of 16, 4 of 8)
  x = rng.standard_normal((rows, 300), np.float32)
  w = rng.standard_normal((300, 203), np.float32)
  e = np.ascontiguousarray(w.T)  # [n, d]
  for product, operand, transposed in (
    (small_k.matmul, w, False),
    (small_k.matmul_transposed, e, True),
  ):
    target = "specsample_small_k_matmul_transposed" if transposed else "specsample_small_k_matmul"
    assert (target in _hlo(product, x, operand)) == (
      rows <= small_k.row_limit(transposed=transposed)
    )
    _close(_jit(product)(x, operand), x, w)
  # The kernels themselves take up to MAX_ROWS rows, also past this CPU's row limits.
  _close(_jit(small_k.kernel_matmul)(x, w), x, w)
  _close(_jit(small_k.kernel_matmul_transposed)(x, e), x, w)


def test_row_limits_stay_within_what_the_kernels_take():
  assert set(small_k.ROW_LIMITS) == set(native.ISA_CODES)
  for rows, rows_transposed in small_k.ROW_LIMITS.values():
    assert 1 <= rows <= small_k.MAX_ROWS  # kMaxRows in small_k_matmul.h
    assert 1 <= rows_transposed <= small_k.MAX_ROWS_TRANSPOSED <= small_k.MAX_ROWS


@pytest.mark.parametrize(
  "x_shape, n",
  [
    ((1, 1), 1),  # one of everything
    ((2, 3, 5), 7),  # leading axes, n below one vector
    ((4, 17), 33),  # tails everywhere
    ((9, 768), 2048),  # a T5-base-sized layer: split over threads
    ((2, 8, 384), 4100),  # more than one 4096-column chunk, plus a tail
    ((3, 2048), 513),  # d split over threads unevenly
    ((2, 13, 96), 300),  # 26 rows: groups of 8-9 (AVX-512) or 6-7 (AVX2) per strip of w
    ((7, 40), 61),  # AVX2: 7 rows as 3 + 4 over each strip; 8-lane tails
    ((2, 9, 770), 2001),  # 18 rows: the transposed kernel's 12-row blocks, d tails, threads
  ],
)
def test_matmul_matches_product_for_odd_shapes(x_shape, n, isa):
  rng = np.random.default_rng(sum(x_shape) + n)
  x = rng.standard_normal(x_shape, np.float32)
  w = rng.standard_normal((x_shape[-1], n), np.float32)
  y = _jit(small_k.matmul)(x, w)
  assert y.shape == (*x_shape[:-1], n) and y.dtype == jnp.float32
  _close(y, x, w)
  yt = _jit(small_k.matmul_transposed)(x, np.ascontiguousarray(w.T))
  assert yt.shape == (*x_shape[:-1], n)
  _close(yt, x, w)


@pytest.mark.parametrize("rows", [1, 2, 3, 4, 5, 7, 9, 13, 17, 32])
def test_bfloat16_weights_give_the_float32_product_of_the_widened_weights(rows, isa):
  # bfloat16 weights stay bfloat16 (no widened copy in the program) and are widened in
  # registers: the product equals, bit for bit, the kernel's float32 product of the same
  # weights stored as float32. n = 2001 and d = 300: thread splits and tails.
  rng = np.random.default_rng(100 + rows)
  x = rng.standard_normal((rows, 300), np.float32)
  w = jnp.asarray(rng.standard_normal((300, 2001), np.float32), jnp.bfloat16)
  e = jnp.asarray(np.ascontiguousarray(np.asarray(w, np.float32).T), jnp.bfloat16)
  for product, half in ((small_k.matmul, w), (small_k.matmul_transposed, e)):
    hlo = _hlo(product, x, half)
    assert "_bf16" in hlo and f"f32[{','.join(map(str, half.shape))}]" not in hlo
    ours = _jit(product)(x, half)
    np.testing.assert_array_equal(ours, _jit(product)(x, np.asarray(half, np.float32)))
    _close(ours, x, np.asarray(w, np.float32))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_each_row_is_summed_as_if_it_were_alone(dtype, isa):
  # Plain decoding multiplies one row per sequence, verification gamma + 1 rows per
  # sequence: each row of a k-row product must equal that row multiplied alone, bit for
  # bit, for every k, so that speculative greedy decoding sees the logits plain greedy
  # decoding sees (as far as the products go).
  rng = np.random.default_rng(7)
  x = rng.standard_normal((small_k.MAX_ROWS_TRANSPOSED, 300), np.float32)
  w = jnp.asarray(rng.standard_normal((300, 2001), np.float32), dtype)
  e = jnp.asarray(rng.standard_normal((2001, 300), np.float32), dtype)
  for product, weights in ((small_k.matmul, w), (small_k.matmul_transposed, e)):
    function = _jit(product)
    alone = np.concatenate([function(x[r : r + 1], weights) for r in range(len(x))])
    for k in range(2, len(x) + 1):
      np.testing.assert_array_equal(function(x[:k], weights), alone[:k], err_msg=f"k={k}")
  # The norms' sums too (RMSNorm's mean square goes through small_k.row_sums).
  sums = _jit(small_k.row_sums)
  assert "specsample_small_k_matmul" in _hlo(small_k.row_sums, x)
  alone = np.concatenate([sums(x[r : r + 1]) for r in range(len(x))])
  np.testing.assert_allclose(alone, x.astype(np.float64).sum(-1), rtol=1e-5, atol=1e-4)
  for k in range(2, len(x) + 1):
    np.testing.assert_array_equal(sums(x[:k]), alone[:k], err_msg=f"row sums, k={k}")


def test_products_the_kernel_does_not_take_go_to_xla(monkeypatch, isa):
  rng = np.random.default_rng(0)
  w = rng.standard_normal((64, 32), np.float32)
  many = rng.standard_normal((small_k.MAX_ROWS + 1, 64), np.float32)
  assert "specsample_small_k" not in _hlo(small_k.matmul, many, w)
  _close(_jit(small_k.matmul)(many, w), many, w)
  half = jnp.asarray(many[:4], jnp.bfloat16)  # not float32
  assert "specsample_small_k" not in _hlo(small_k.matmul, half, jnp.asarray(w, jnp.bfloat16))
  few = many[:4]
  monkeypatch.setenv(native.ENV_VARIABLE, "xla")
  assert "specsample_small_k" not in _hlo(small_k.matmul, few, w)
  assert "specsample_small_k" not in _hlo(small_k.matmul_transposed, few, w.T)
  monkeypatch.delenv(native.ENV_VARIABLE)
  assert "specsample_small_k_matmul" in _hlo(small_k.matmul, few, w)


def test_bad_shapes_are_refused():
  x = jnp.ones((2, 8))
  with pytest.raises(ValueError, match=r"x \[..., d\] and w \[d, n\]"):
    small_k.matmul(x, jnp.ones((4, 8)))
  with pytest.raises(ValueError, match=r"e \[n, d\]"):
    small_k.matmul_transposed(x, jnp.ones((8, 4)))
  with pytest.raises(ValueError):
    small_k.matmul(x, jnp.ones((8,)))


def test_gradients_and_vmap_match_xla(isa):
  rng = np.random.default_rng(1)
  x = jnp.asarray(rng.standard_normal((3, 40), np.float32))
  w = jnp.asarray(rng.standard_normal((40, 24), np.float32))
  cotangent = jnp.asarray(rng.standard_normal((3, 24), np.float32))

  def loss(product, x, w):
    return jnp.sum(product(x, w) * cotangent)

  ours = jax.grad(lambda x, w: loss(small_k.matmul, x, w), argnums=(0, 1))(x, w)
  xla = jax.grad(lambda x, w: loss(jnp.matmul, x, w), argnums=(0, 1))(x, w)
  for a, b in zip(ours, xla, strict=True):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
  ours_t = jax.grad(lambda x, e: loss(small_k.matmul_transposed, x, e), argnums=(0, 1))(x, w.T)
  np.testing.assert_allclose(ours_t[0], xla[0], rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(ours_t[1], xla[1].T, rtol=1e-5, atol=1e-5)
  batched = jax.vmap(small_k.matmul, in_axes=(0, None))(x[:, None, :], w)  # [3, 1, 24]
  _close(batched[:, 0], np.asarray(x), np.asarray(w))


def test_independent_products_in_one_program_share_the_thread_pool(isa):
  # XLA may run independent custom calls at once; each hands work to the same pool and must
  # neither deadlock nor mix up its parts.
  rng = np.random.default_rng(2)
  xs = [rng.standard_normal((k, 512), np.float32) for k in (1, 5, 9, 16)]
  ws = [rng.standard_normal((512, 1024), np.float32) for _ in xs]

  @jax.jit
  def products(xs, ws):
    return [small_k.matmul(x, w) for x, w in zip(xs, ws, strict=True)]

  for _ in range(3):
    for y, x, w in zip(products(xs, ws), xs, ws, strict=True):
      _close(y, x, w)


def _extend_logits(model, tokens):
  """A new jitted function of (model, tokens) -> logits: the kernel is chosen while tracing,
  and jit keeps one trace per function."""
  prompts = jnp.ones((tokens.shape[0], 6), jnp.int32)
  lengths = jnp.full((tokens.shape[0],), 6, jnp.int32)

  def run(model, tokens):
    state, _ = model.init_state(prompts, lengths, 32)
    return model.extend(state, tokens, jnp.zeros((tokens.shape[0],), jnp.int32))[0]

  return jax.jit(run)


@pytest.mark.parametrize("family", ["t5 v1.0 (tied output layer)", "t5 v1.1", "decoder-only tied"])
def test_models_give_the_same_logits_with_the_kernel(family, monkeypatch, isa):
  from specsample.models.decoder_only import DecoderOnly, DecoderOnlyConfig
  from specsample.models.t5 import T5, T5Config

  if family.startswith("t5"):
    v11 = family == "t5 v1.1"
    config = T5Config(
      vocab_size=500, d_model=64, num_heads=4, head_dim=16, mlp_dim=128, num_encoder_layers=2,
      num_decoder_layers=2, tie_word_embeddings=not v11,
      mlp_activations=("gelu", "linear") if v11 else ("relu",),
    )  # fmt: skip
    model = T5.init_random(config, seed=3)
  else:
    config = DecoderOnlyConfig(
      vocab_size=500, d_model=64, num_heads=4, num_kv_heads=2, head_dim=16, mlp_dim=128,
      num_layers=2, tie_word_embeddings=True,
    )  # fmt: skip
    model = DecoderOnly.init_random(config, seed=3)
  tokens = jnp.asarray(np.random.default_rng(4).integers(2, 500, (2, 5)), jnp.int32)
  extend = _extend_logits(model, tokens)
  hlo = extend.lower(model, tokens).compile().as_text()
  assert "specsample_small_k_matmul" in hlo
  if config.tie_word_embeddings:  # the output layer reads the [vocab, d] embedding as it
    assert "f32[64,500]" not in hlo  # lies: no transposed copy of it per call
  ours = extend(model, tokens)
  monkeypatch.setenv(native.ENV_VARIABLE, "xla")
  extend_xla = _extend_logits(model, tokens)
  assert "specsample_small_k" not in extend_xla.lower(model, tokens).as_text()
  xla = extend_xla(model, tokens)
  np.testing.assert_allclose(ours, xla, rtol=1e-4, atol=1e-4)
  assert np.array_equal(np.argmax(ours, -1), np.argmax(xla, -1))


@requires_kernel
def test_accelerator_programs_never_contain_the_custom_call():
  # The kernel is chosen per platform while lowering: a program lowered for TPU or GPU
  # (here without such a device: lowering only) has XLA's products, a CPU one the kernel.
  x, w = jnp.ones((4, 64)), jnp.ones((64, 32))
  function = jax.jit(lambda x, w: small_k.matmul(x, w) + small_k.matmul_transposed(x, w.T))
  for platform in ("tpu", "cuda", "cpu"):
    text = function.trace(x, w).lower(lowering_platforms=(platform,)).as_text()
    assert ("specsample_small_k" in text) == (platform == "cpu"), platform
    assert ("dot_general" in text) == (platform != "cpu"), platform


def test_without_the_extension_every_product_goes_to_xla(monkeypatch):
  # An install without a C++ compiler has no extension: products must still work (XLA's),
  # and why_not_available must say why.
  real_find_spec = native.importlib.util.find_spec

  def find_spec(name, *args):
    return None if name == native.EXTENSION else real_find_spec(name, *args)

  monkeypatch.setattr(native.importlib.util, "find_spec", find_spec)
  native.choose_again()
  try:
    assert not native.kernel_available()
    assert "not built" in native.why_not_available()
    x, w = np.ones((3, 8), np.float32), np.ones((8, 5), np.float32)
    assert not small_k.uses_kernel(x.shape, x.dtype, w.dtype)
    assert "specsample_small_k" not in _hlo(small_k.matmul, x, w)
    np.testing.assert_allclose(jax.jit(lambda a, b: small_k.matmul(a, b))(x, w), x @ w)
  finally:
    monkeypatch.undo()
    native.choose_again()  # registers the targets again (idempotent)
  assert "not built" not in (native.why_not_available() or "")
