"""The CPU kernel for products with few rows (specsample.kernels.small_k).

It must give XLA's product to float32 rounding for every shape it takes (row counts 1..16,
tails of the 16-float vectors, leading axes, thread splits), hand everything else to XLA,
differentiate like a product, and leave the models' outputs unchanged.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specsample.kernels import small_k

requires_kernel = pytest.mark.skipif(
  small_k.why_not_available() == "this CPU lacks AVX-512", reason="this CPU lacks AVX-512"
)


def _close(actual, x, w_dn):
  """|actual - x @ w| within float32 rounding of a d-term sum, against float64."""
  expected = np.asarray(x, np.float64) @ np.asarray(w_dn, np.float64)
  scale = np.abs(np.asarray(x, np.float64)) @ np.abs(np.asarray(w_dn, np.float64)) + 1e-30
  error = np.abs(np.asarray(actual, np.float64) - expected) / scale
  assert error.max() < 1e-6 * max(1, x.shape[-1]) ** 0.5, error.max()


def _hlo(function, *args) -> str:
  # A new function each time: jit caches traces by function, and the choice is made while
  # tracing.
  return jax.jit(lambda *a: function(*a)).lower(*args).as_text()


@requires_kernel
def test_kernel_is_built_here():
  # CI builds it (pip install -e . compiles setup.py's extension); a silent fallback to XLA
  # would leave every other test here testing XLA against itself.
  assert small_k.kernel_available(), small_k.why_not_available()


@requires_kernel
@pytest.mark.parametrize("rows", [*range(1, 18), 20, 31, 32, 33, 48, 64])
def test_matmul_matches_product_for_every_row_count(rows):
  rng = np.random.default_rng(rows)
  # n = 200: full vectors of every width and a 8-float tail; d = 300 rows of w
  x = rng.standard_normal((rows, 300), np.float32)
  w = rng.standard_normal((300, 200), np.float32)
  assert "specsample_small_k_matmul" in _hlo(small_k.matmul, x, w)
  _close(jax.jit(small_k.matmul)(x, w), x, w)
  e = np.ascontiguousarray(w.T)  # [n, d]
  transposed = _hlo(small_k.matmul_transposed, x, e)
  assert ("specsample_small_k_matmul_transposed" in transposed) == (
    rows <= small_k.MAX_ROWS_TRANSPOSED
  )
  _close(jax.jit(small_k.matmul_transposed)(x, e), x, w)


@requires_kernel
@pytest.mark.parametrize(
  "x_shape, n",
  [
    ((1, 1), 1),  # one of everything
    ((2, 3, 5), 7),  # leading axes, n below one vector
    ((4, 17), 33),  # tails everywhere
    ((9, 768), 2048),  # a T5-base-sized layer: split over threads
    ((2, 8, 384), 4100),  # more than one 4096-column chunk, plus a tail
    ((3, 2048), 513),  # d split over threads unevenly
    ((2, 13, 96), 300),  # 26 rows: two groups of 13 over each strip of w
  ],
)
def test_matmul_matches_product_for_odd_shapes(x_shape, n):
  rng = np.random.default_rng(sum(x_shape) + n)
  x = rng.standard_normal(x_shape, np.float32)
  w = rng.standard_normal((x_shape[-1], n), np.float32)
  y = jax.jit(small_k.matmul)(x, w)
  assert y.shape == (*x_shape[:-1], n) and y.dtype == jnp.float32
  _close(y, x, w)
  yt = jax.jit(small_k.matmul_transposed)(x, np.ascontiguousarray(w.T))
  assert yt.shape == (*x_shape[:-1], n)
  _close(yt, x, w)


@requires_kernel
def test_products_the_kernel_does_not_take_go_to_xla(monkeypatch):
  rng = np.random.default_rng(0)
  w = rng.standard_normal((64, 32), np.float32)
  many = rng.standard_normal((small_k.MAX_ROWS + 1, 64), np.float32)
  assert "specsample_small_k" not in _hlo(small_k.matmul, many, w)
  _close(jax.jit(small_k.matmul)(many, w), many, w)
  half = jnp.asarray(many[:4], jnp.bfloat16)  # not float32
  assert "specsample_small_k" not in _hlo(small_k.matmul, half, jnp.asarray(w, jnp.bfloat16))
  few = many[:4]
  monkeypatch.setenv(small_k.ENV_VARIABLE, "xla")
  assert "specsample_small_k" not in _hlo(small_k.matmul, few, w)
  assert "specsample_small_k" not in _hlo(small_k.matmul_transposed, few, w.T)
  monkeypatch.delenv(small_k.ENV_VARIABLE)
  assert "specsample_small_k_matmul" in _hlo(small_k.matmul, few, w)


def test_bad_shapes_are_refused():
  x = jnp.ones((2, 8))
  with pytest.raises(ValueError, match=r"x \[..., d\] and w \[d, n\]"):
    small_k.matmul(x, jnp.ones((4, 8)))
  with pytest.raises(ValueError, match=r"e \[n, d\]"):
    small_k.matmul_transposed(x, jnp.ones((8, 4)))
  with pytest.raises(ValueError):
    small_k.matmul(x, jnp.ones((8,)))


@requires_kernel
def test_gradients_and_vmap_match_xla():
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


@requires_kernel
def test_independent_products_in_one_program_share_the_thread_pool():
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


@requires_kernel
@pytest.mark.parametrize("family", ["t5 v1.0 (tied output layer)", "t5 v1.1", "decoder-only tied"])
def test_models_give_the_same_logits_with_the_kernel(family, monkeypatch):
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
  monkeypatch.setenv(small_k.ENV_VARIABLE, "xla")
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
  real_find_spec = small_k.importlib.util.find_spec

  def find_spec(name, *args):
    return None if name == small_k._EXTENSION else real_find_spec(name, *args)

  monkeypatch.setattr(small_k.importlib.util, "find_spec", find_spec)
  small_k._load.cache_clear()
  try:
    assert not small_k.kernel_available()
    assert "not built" in small_k.why_not_available()
    x, w = np.ones((3, 8), np.float32), np.ones((8, 5), np.float32)
    assert not small_k.uses_kernel(x.shape, x.dtype, w.dtype)
    assert "specsample_small_k" not in _hlo(small_k.matmul, x, w)
    np.testing.assert_allclose(jax.jit(lambda a, b: small_k.matmul(a, b))(x, w), x @ w)
  finally:
    monkeypatch.undo()
    small_k._load.cache_clear()  # registers the targets again (idempotent)
  assert small_k.why_not_available() in (None, "this CPU lacks AVX-512")
