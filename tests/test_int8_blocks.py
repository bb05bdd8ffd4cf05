"""GGUF blocks multiplied with 8-bit activations (specsample.kernels.int8_blocks).

The packing must keep every number of the file (its inverse gives the file's bytes back;
its dequantization is the gguf package's); the kernel must compute exactly the NumPy
reference's integer arithmetic, bit for bit, on every instruction set this CPU has, and
each row exactly as it would alone (k rows = k one-row products, k = 1..32, so a verify
call's logits equal plain decoding's). Models loaded with activations="int8" keep their
blocks packed, stay close to the float32-activation logits, and speculative greedy output
equals plain greedy output of the same arithmetic.
"""

from __future__ import annotations

import dataclasses

import gguf
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from tiny_gguf import (
  FORMATS,
  LARGE,
  SMALL,
  logits_beside,
  quantized,
  requires_kernel,
  speculative_and_plain,
  write_tiny,
  write_tiny_blocks,
)

from specsample.checkpoints import load_model
from specsample.kernels import blocks, int8_blocks, int8_layout, native
from specsample.models.weights import activations, block_formats


def _rows(format: str) -> int:
  return 3 if format.endswith("_k") else 7  # blocks per row of W


@pytest.mark.parametrize("format", list(FORMATS))
def test_packing_keeps_every_number_of_the_file(format):
  # Random bytes: every scale (subnormals, infinities, NaNs) and every stored value.
  rng = np.random.default_rng(0)
  features = _rows(format) * blocks.BLOCK_WEIGHTS[format]
  raw = rng.integers(0, 256, (37, _rows(format) * blocks.BLOCK_BYTES[format]), np.uint8)
  packed = int8_layout.pack(raw, format)
  assert packed.shape == (3, _rows(format) * int8_layout.PACKED_BYTES[format])  # 37 -> 3 groups
  np.testing.assert_array_equal(int8_layout.to_gguf_blocks(packed, format, 37), raw)
  with np.errstate(invalid="ignore"):  # inf * 0 scales
    expected = gguf.quants.dequantize(raw, FORMATS[format]).reshape(37, features)
  matrix = int8_blocks.from_gguf_blocks(raw, format)
  assert matrix.shape == (37, features) and matrix.rows == 37
  np.testing.assert_array_equal(jax.jit(int8_blocks.dequantize)(matrix), expected)
  ids = jnp.asarray([[3, 0], [36, 17]], jnp.int32)  # a few rows: one slice each
  np.testing.assert_array_equal(jax.jit(int8_blocks.take_rows)(matrix, ids), expected[ids])
  ids = jnp.asarray(rng.integers(0, 37, (3, 7)), jnp.int32)  # more: one gather
  np.testing.assert_array_equal(jax.jit(int8_blocks.take_rows)(matrix, ids), expected[ids])
  chosen = int8_blocks.select_rows(matrix, [36, 2, 2, 20])
  np.testing.assert_array_equal(int8_blocks.dequantize(chosen), expected[[36, 2, 2, 20]])


def test_quantize_rows_is_llama_cpp_s_block_quantization():
  x = np.array([[0.5, -1.27, 0.0, 2.54e-3] * 8 + [0.0] * 32], np.float32)  # two blocks
  q, dx, s16, dxs = int8_blocks.quantize_rows(x)
  assert dx[0, 0] == np.float32(1.27) / np.float32(127) and dx[0, 1] == 0
  assert q[0, 0, :4].tolist() == [50, -127, 0, 0] and not q[0, 1].any()
  assert s16[0, 0].tolist() == [4 * (50 - 127), 4 * (50 - 127)] and dxs[0, 1] == 0
  assert dxs[0, 0] == dx[0, 0] * np.float32(8 * (50 - 127))
  # ties to even: x / dx = 0.5 and 1.5 round to 0 and 2
  q, _, _, _ = int8_blocks.quantize_rows(np.array([[127.0, 0.5, 1.5] + [0] * 29], np.float32))
  assert q[0, 0, :3].tolist() == [127, 0, 2]


def _packed_and_x(seed: int, n: int, d: int, format: str, x_rows: int):
  """A random [n, d] matrix in `format` (tiny_gguf.quantized) packed for 8-bit activations,
  its float32 values, and x [x_rows, d] standard normal: drawn from one rng in this order."""
  rng = np.random.default_rng(seed)
  matrix, values = quantized(rng, n, d, format)
  packed = int8_blocks.from_gguf_blocks(np.asarray(matrix.blocks), format)
  x = rng.standard_normal((x_rows, d)).astype(np.float32)
  return packed, values, x


def _reference(x, packed: int8_blocks.Int8BlockMatrix) -> np.ndarray:
  """The NumPy reference's product of x and the packed matrix."""
  return int8_blocks.reference_matmul(x, np.asarray(packed.packed), packed.format, packed.rows)


@jax.jit
def _products(x, matrix):
  """In one program (one compilation): the products of the first k rows of x for every
  k, and of each row alone."""
  rows = x.shape[0]
  by_count = [int8_blocks.matmul(x[:k], matrix) for k in range(1, rows + 1)]
  alone = [int8_blocks.matmul(x[r : r + 1], matrix) for r in range(rows)]
  return by_count, jnp.concatenate(alone)


@requires_kernel
@pytest.mark.parametrize("format", list(FORMATS))
def test_kernel_equals_the_numpy_reference_bit_for_bit(format, integer_isa):
  # n = 301: a partial last group and thread splits; every row count 1..32: tiles of up
  # to 8 rows and their balanced groups; each row equals the row multiplied alone.
  d = 512 if format.endswith("_k") else 320
  packed, values, x = _packed_and_x(1, 301, d, format, 32)
  x = x * np.linspace(0.01, 30, d, dtype=np.float32)
  assert (
    "specsample_int8_matmul_" + format in jax.jit(int8_blocks.matmul).lower(x, packed).as_text()
  )
  by_count, alone = _products(x, packed)
  reference = _reference(x, packed)
  for k, product in enumerate(by_count, start=1):
    np.testing.assert_array_equal(product, reference[:k], err_msg=f"k={k}")
  np.testing.assert_array_equal(alone, reference)
  # The arithmetic differs from float32 by the activations' rounding only.
  exact = x.astype(np.float64) @ values.astype(np.float64).T
  scale = np.abs(x.astype(np.float64)) @ np.abs(values.astype(np.float64)).T
  assert (np.abs(reference - exact) / scale).max() < 0.02


@requires_kernel
@pytest.mark.parametrize("format", ["q8_0", "q4_1", "q6_k"])
def test_a_prefill_s_rows_in_chunks_equal_the_reference(format, integer_isa):
  # 150 rows: the kernel passes over them in chunks of 64 (64, 64, 22; prefills and large
  # batches), each chunk in tiles; every row equals the NumPy reference bit for bit.
  packed, _, x = _packed_and_x(3, 37, 256 if format.endswith("_k") else 96, format, 150)
  np.testing.assert_array_equal(jax.jit(int8_blocks.matmul)(x, packed), _reference(x, packed))


@requires_kernel
@pytest.mark.parametrize("format", ["q8_0", "q4_1", "q6_k"])
def test_the_greedy_summary_is_that_of_the_product_s_logits(format, integer_isa):
  # One kernel call gives what greedy drafting reads of a product (argmax, largest logit,
  # top probability) without the logits: equal to those of matmul's logits, row by row,
  # for n = 301 (a partial group, a tail of the vector width) and every row count 1..12
  # (two calls past small_k.MAX_ROWS), ties to the lowest index.
  d = 512 if format.endswith("_k") else 320
  packed, _, x = _packed_and_x(6, 301, d, format, 12)
  x = x * np.linspace(0.01, 3, d, dtype=np.float32)
  tied = int8_blocks.select_rows(packed, [7, 5, 7, 5, 1])  # two rows equal to row 0 and 1

  @jax.jit
  def both(x, matrix):
    return [(int8_blocks.greedy_matmul(x[:k], matrix), int8_blocks.matmul(x[:k], matrix))
            for k in range(1, x.shape[0] + 1)]  # fmt: skip

  assert (
    "specsample_int8_greedy_" + format
    in jax.jit(int8_blocks.greedy_matmul).lower(x, packed).as_text()
  )
  for matrix in (packed, tied):
    for k, ((token, best, top), logits) in enumerate(both(x, matrix), start=1):
      logits = np.asarray(logits, np.float64)
      np.testing.assert_array_equal(token, logits.argmax(-1), err_msg=f"k={k}")
      np.testing.assert_array_equal(best, logits.max(-1))
      shifted = np.exp(logits - logits.max(-1, keepdims=True))
      np.testing.assert_allclose(top, 1 / shifted.sum(-1), rtol=2e-6)
  # The tied rows did tie for the maximum: the lowest index was the one taken.
  logits = np.asarray(int8_blocks.matmul(x, tied))
  assert ((logits == logits.max(-1, keepdims=True)).sum(-1) == 2).any()


@requires_kernel
@pytest.mark.parametrize("format", ["q8_0", "q4_1"])
@pytest.mark.parametrize("passes", [1, 2])
def test_a_nan_in_a_row_makes_that_row_s_products_nan(format, passes, integer_isa):
  # A NaN must not vanish into a finite 8-bit block (the block maximum would skip it):
  # its row's products are all NaN, as the NumPy reference's, and the greedy summary
  # flags the row; the other rows are untouched.
  packed, _, x = _packed_and_x(8, 40, 96, format, 3)
  packed = dataclasses.replace(packed, passes=passes)
  x[1, 70] = np.nan
  y = np.asarray(jax.jit(int8_blocks.matmul)(x, packed))
  with np.errstate(invalid="ignore"):
    reference = int8_blocks.reference_matmul(
      x, np.asarray(packed.packed), format, packed.rows, passes=passes
    )
  assert np.isnan(y[1]).all() and np.isfinite(y[[0, 2]]).all()
  np.testing.assert_array_equal(y, reference)
  _, best, _ = jax.jit(int8_blocks.greedy_matmul)(x, packed)
  best = np.asarray(best)
  assert np.isnan(best[1]) and np.isfinite(best[[0, 2]]).all()


def test_the_greedy_summary_without_the_kernel(monkeypatch):
  packed, _, x = _packed_and_x(7, 48, 64, "q8_0", 3)
  monkeypatch.setenv(native.ENV_VARIABLE, "xla")
  summary = jax.jit(lambda x, m: int8_blocks.greedy_matmul(x, m))  # traced anew: no kernel
  assert "specsample_int8" not in summary.lower(x, packed).as_text()
  token, best, top = summary(x, packed)
  logits = np.asarray(jax.jit(lambda x, m: int8_blocks.matmul(x, m))(x, packed), np.float64)
  np.testing.assert_array_equal(token, logits.argmax(-1))
  np.testing.assert_allclose(best, logits.max(-1), rtol=1e-6)
  shifted = np.exp(logits - logits.max(-1, keepdims=True))
  np.testing.assert_allclose(top, 1 / shifted.sum(-1), rtol=2e-6)


# Byte offsets of each block's float16 scales (set to small finite numbers); every other
# byte 0xFF: every weight at its largest stored value (nibbles 15, Q5_0's 31, Q6_K's 63),
# Q8_0's at -1, or 0x80 bytes: -128, the largest magnitude.
SCALE_OFFSETS = {
  "q8_0": (0,), "q4_0": (0,), "q4_1": (0, 2), "q5_0": (0,), "q4_k": (0, 2), "q6_k": (208,),
}  # fmt: skip


@requires_kernel
@pytest.mark.parametrize("format", list(FORMATS))
@pytest.mark.parametrize("fill", [0xFF, 0x80])
def test_integer_sums_at_their_limits(format, fill):
  # Every weight at its extreme stored value against activations all +-127: the largest
  # integer sums a block can have, which the kernels' narrow (16-bit) partial sums must
  # hold without saturating: equal to the NumPy reference bit for bit.
  per_row = 2 if format.endswith("_k") else 4
  raw = np.full((20, per_row, blocks.BLOCK_BYTES[format]), fill, np.uint8)
  for offset in SCALE_OFFSETS[format]:
    raw[..., offset : offset + 2] = np.array([0.01], np.float16).view(np.uint8)
  raw = raw.reshape(20, -1)
  packed = int8_blocks.from_gguf_blocks(raw, format)
  d = per_row * blocks.BLOCK_WEIGHTS[format]
  signs = np.where(np.arange(d) % 2 == 0, 1.0, -1.0)
  x = np.stack([np.ones(d), -np.ones(d), signs, -signs]).astype(np.float32)  # q = +-127
  y = jax.jit(int8_blocks.matmul)(x, packed)
  reference = _reference(x, packed)
  np.testing.assert_array_equal(y, reference)
  assert np.abs(reference).max() > 0


@requires_kernel
@pytest.mark.parametrize("format", list(FORMATS))
def test_every_instruction_set_computes_the_same_numbers(format):
  # Integer sums are exact and the float steps the same: the numbers do not depend on the
  # instruction set (the float32-activation kernels' do).
  packed, _, x = _packed_and_x(2, 40, 256 if format.endswith("_k") else 96, format, 5)
  by_isa = {}
  try:
    for isa in native.supported_instruction_sets():
      with pytest.MonkeyPatch.context() as patch:
        patch.setenv(native.ISA_VARIABLE, isa)
        native.choose_again()
        product = jax.jit(lambda x, m: int8_blocks.matmul(x, m))  # traced anew: this isa
        by_isa[native.integer_instruction_set()] = np.asarray(product(x, packed))
  finally:
    native.choose_again()
    native.kernel_available()
  assert len(by_isa) == len(native.supported_instruction_sets())
  for isa, y in by_isa.items():
    np.testing.assert_array_equal(y, by_isa[native.integer_instruction_set()], err_msg=isa)


@pytest.mark.parametrize("format", ["q8_0", "q4_1", "q6_k"])
def test_without_the_kernel_xla_computes_the_same_arithmetic(monkeypatch, format):
  d = 256 if format.endswith("_k") else 64
  packed, _, x = _packed_and_x(4, 48, d, format, 70)  # more rows than one call takes
  reference = _reference(x, packed)
  tolerance = dict(rtol=1e-5, atol=1e-5 * np.abs(reference).max())
  if native.kernel_available():  # 70 rows: calls of small_k.MAX_ROWS rows
    np.testing.assert_array_equal(jax.jit(int8_blocks.matmul)(x, packed), reference)
  monkeypatch.setenv(native.ENV_VARIABLE, "xla")
  product = jax.jit(lambda x, m: int8_blocks.matmul(x, m))  # traced anew: the kernel is off
  assert "specsample_int8" not in product.lower(x, packed).as_text()
  np.testing.assert_allclose(product(x, packed), reference, **tolerance)


@requires_kernel
def test_accelerator_lowerings_use_xla():
  matrix, _ = quantized(np.random.default_rng(5), 48, 64, "q8_0")
  packed = int8_blocks.from_gguf_blocks(np.asarray(matrix.blocks), "q8_0")
  function = jax.jit(int8_blocks.matmul)
  for platform in ("tpu", "cuda", "cpu"):
    text = function.trace(jnp.ones((2, 64)), packed).lower(lowering_platforms=(platform,)).as_text()
    assert ("specsample_int8_matmul_q8_0" in text) == (platform == "cpu"), platform


def test_bad_matrices_are_refused():
  with pytest.raises(ValueError, match="block format must be one of"):
    int8_blocks.Int8BlockMatrix(np.zeros((1, 544), np.uint8), "q5_1", 16)
  with pytest.raises(ValueError, match=r"packed q8_0 matrix of 17 rows: expected uint8 \[2, "):
    int8_blocks.Int8BlockMatrix(np.zeros((1, 544), np.uint8), "q8_0", 17)
  with pytest.raises(ValueError, match=r"expected uint8 \[out, blocks \* 20\]"):
    int8_layout.pack(np.zeros((2, 30), np.uint8), "q4_1")
  matrix = int8_blocks.from_gguf_blocks(np.zeros((2, 34), np.uint8), "q8_0")
  with pytest.raises(ValueError, match=r"against a \[2, 32\] matrix"):
    int8_blocks.matmul(jnp.ones((1, 64)), matrix)


# --- models ------------------------------------------------------------------------------


@pytest.mark.parametrize("qtype", [Q.Q8_0, Q.Q4_1, Q.Q5_0, Q.Q4_K], ids=lambda q: q.name)
def test_a_gguf_model_with_8_bit_activations(tmp_path, qtype):
  path = tmp_path / "tiny.gguf"
  shape = write_tiny_blocks(path, qtype, seed=5)
  float32 = load_model(path, gguf_blocks=True)
  int8 = load_model(path, gguf_blocks=True, activations="int8")
  kernel = int8.params["blocks_1"]["down"]["kernel"]
  assert isinstance(kernel, int8_blocks.Int8BlockMatrix) and kernel.format == qtype.name.lower()
  assert activations(int8) == "int8" and activations(float32) == "float32"
  assert block_formats(int8) == block_formats(float32)
  ours, reference = logits_beside(int8, float32, shape["vocab"])
  # Another arithmetic, near the float32 one (a random model amplifies the activations'
  # rounding: Q4_1's minimum terms, multiplied by rounded sums of x, cancel the rest).
  assert not np.array_equal(ours, reference)
  assert np.linalg.norm(ours - reference) < 0.4 * np.linalg.norm(reference)
  # Speculative greedy output equals plain greedy output of the same arithmetic.
  speculative_and_plain(int8, shape["vocab"], gammas=(1, 4))
  with pytest.raises(ValueError, match="activations='int8' needs gguf_blocks=True"):
    load_model(path, activations="int8")
  with pytest.raises(ValueError, match="activations must be one of"):
    load_model(path, gguf_blocks=True, activations="int4")
  with pytest.raises(ValueError, match="cache_dtype must be 'float32', 'bfloat16' or None"):
    load_model(path, gguf_blocks=True, cache_dtype="float16")
  assert float32.config.cache_dtype is None  # float32 arithmetic keeps a float32 cache


def test_8_bit_activations_over_a_bfloat16_cache(tmp_path):
  """Under 8-bit activations the loader keeps a bfloat16 cache (config.cache_dtype), which
  the fused layer reads: other logits than a float32 cache's, near them, and speculative
  greedy output equal to plain greedy output of that arithmetic."""
  path = tmp_path / "tiny.gguf"
  write_tiny(path, Q.Q4_1, s=LARGE, seed=5)
  model = load_model(path, gguf_blocks=True, activations="int8")  # the default: bfloat16
  float32_cache = load_model(path, gguf_blocks=True, activations="int8", cache_dtype="float32")
  assert model.config.cache_dtype == "bfloat16" and float32_cache.config.cache_dtype == "float32"
  ours, reference = logits_beside(model, float32_cache, LARGE["vocab"])
  assert not np.array_equal(ours, reference)
  assert np.linalg.norm(ours - reference) < 0.05 * np.linalg.norm(reference)
  speculative_and_plain(model, LARGE["vocab"])


def test_the_calibration_key_names_the_cache(tmp_path):
  """`cache_numbers` (in the pair's calibration key): what each model's caches hold."""
  from specsample.models.weights import cache_numbers

  path = tmp_path / "tiny.gguf"
  write_tiny(path, Q.Q8_0, s=SMALL, seed=5)
  assert cache_numbers(load_model(path, gguf_blocks=True, activations="int8")) == "bfloat16"
  assert cache_numbers(load_model(path, gguf_blocks=True)) == "float32"
  float32_cache = load_model(path, gguf_blocks=True, activations="int8", cache_dtype="float32")
  assert cache_numbers(float32_cache) == "float32"


@requires_kernel
def test_a_pass_over_many_rows_equals_its_tokens_one_at_a_time(tmp_path):
  """A prefill's rows (here 40 in one pass: the fused layer shares their norms,
  quantization, rotary, SiLU and sums between the threads, kRowsPerThread = 8) give each
  position exactly the logits of that token fed alone after the ones before it."""
  path = tmp_path / "tiny.gguf"
  write_tiny(path, Q.Q4_1, s=LARGE, seed=3)
  model = load_model(path, gguf_blocks=True, activations="int8")
  tokens = jnp.asarray(np.random.default_rng(1).integers(3, LARGE["vocab"], (1, 40)), jnp.int32)
  whole = np.asarray(jax.jit(model.forward)(tokens))  # [1, 40, vocab]
  state, _ = model.init_state(tokens[:, :1], jnp.asarray([1], jnp.int32), 40)
  step = jax.jit(lambda state, token: model.extend(state, token, jnp.ones((1,), jnp.int32)))
  for position in range(40):
    logits, state = step(state, tokens[:, position : position + 1])
    np.testing.assert_array_equal(np.asarray(logits)[0, 0], whole[0, position], str(position))


@requires_kernel
@pytest.mark.parametrize("lengths, worth", [([120, 40], None), ([200, 40], 2.0)])
def test_a_prefill_in_passes_equals_one_pass_bit_for_bit(tmp_path, monkeypatch, lengths, worth):
  """Prompts padded to 200 positions go in passes of PREFILL_CHUNK rows (two; or, with the
  passes always taken, four, the last overlapping the third); with 8-bit activations each
  written position's cache entries and features are one pass's, bit for bit."""
  from specsample.models import prefill

  if worth is not None:
    monkeypatch.setattr(prefill, "PASSES_WORTH", worth)
  path = tmp_path / "tiny.gguf"
  write_tiny(path, Q.Q4_1, s=LARGE, seed=3)
  model = load_model(path, gguf_blocks=True, activations="int8")
  prompts = jnp.asarray(np.random.default_rng(2).integers(3, LARGE["vocab"], (2, 200)), jnp.int32)
  results = []
  for candidate in (prefill.for_padded_prompts(model), model):  # passes; one pass
    run = jax.jit(lambda p, n, m=candidate: m.init_state_with_features(p, n, 4))
    results.append(jax.tree.map(np.asarray, run(prompts, jnp.asarray(lengths, jnp.int32))))
  (state, pending, features), (one_state, one_pending, one_features) = results
  written = 128 if worth is None else 200
  np.testing.assert_array_equal(pending, one_pending)
  np.testing.assert_array_equal(features[:, :written], one_features[:, :written])
  assert not features[:, written:].any()
  for a, b in zip(jax.tree.leaves(state.caches), jax.tree.leaves(one_state.caches)):
    np.testing.assert_array_equal(a[:, :written], b[:, :written])
