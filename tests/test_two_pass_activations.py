"""Activations in two 8-bit passes (`Int8BlockMatrix.passes = 2`, activations="int8x2").

The second pass quantizes each block's rounding error and adds its product. The kernel must
compute exactly the NumPy reference (`reference_matmul(..., passes=2)`) bit for bit, each
row as it would alone, on every instruction set this CPU has; its error against the exact
product must be about 1/250 of one pass's; XLA elsewhere computes the same up to float32
rounding. A model loaded with activations="int8x2" runs the fused layer in two passes, its
logits far nearer the float32-activation model's than one pass's, and speculative greedy
output equals plain greedy output of that arithmetic.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from tiny_gguf import (
  FORMATS,
  LARGE,
  extend_logits,
  quantized,
  requires_kernel,
  speculative_and_plain,
  write_tiny,
)

from specsample.checkpoints import load_model
from specsample.kernels import decoder_layer, int8_blocks, native
from specsample.models.weights import activations


def _both(rng, format, rows, d):
  """The same matrix multiplied with one pass and with two, and its float32 values."""
  matrix, values = quantized(rng, rows, d, format)
  one = int8_blocks.from_gguf_blocks(np.asarray(matrix.blocks), format)
  return one, dataclasses.replace(one, passes=2), values


@jax.jit
def _by_count_and_alone(x, matrix):
  """The products of the first k rows of x for k = 1..rows, and of each row alone."""
  rows = x.shape[0]
  by_count = [int8_blocks.matmul(x[:k], matrix) for k in range(1, rows + 1)]
  return by_count, jnp.concatenate([int8_blocks.matmul(x[r : r + 1], matrix) for r in range(rows)])


@requires_kernel
@pytest.mark.parametrize("format", list(FORMATS))
def test_two_passes_equal_the_numpy_reference_bit_for_bit(format, integer_isa):
  rng = np.random.default_rng(11)
  d = 512 if format.endswith("_k") else 320
  one, two, values = _both(rng, format, 301, d)
  # Magnitudes from 0.01 to 30 across a row: blocks of very different scales.
  x = rng.standard_normal((9, d)).astype(np.float32) * np.linspace(0.01, 30, d, dtype=np.float32)
  assert "passes = 2" in jax.jit(int8_blocks.matmul).lower(x, two).as_text()
  by_count, alone = _by_count_and_alone(x, two)
  reference = int8_blocks.reference_matmul(x, np.asarray(two.packed), format, 301, passes=2)
  for k, product in enumerate(by_count, start=1):
    np.testing.assert_array_equal(product, reference[:k], err_msg=f"k={k}")
  np.testing.assert_array_equal(alone, reference)
  # The second pass takes the activations' error down by two orders of magnitude.
  exact = x.astype(np.float64) @ values.astype(np.float64).T
  scale = np.abs(x.astype(np.float64)) @ np.abs(values.astype(np.float64)).T
  error_one = (np.abs(np.asarray(int8_blocks.matmul(x, one)) - exact) / scale).max()
  error_two = (np.abs(reference - exact) / scale).max()
  assert error_one > 5e-4 and error_two < error_one / 100


def test_the_rounding_error_is_what_one_pass_leaves():
  # e = x - dx q rounded once, q = round(x / dx), dx = max |x| / 127: at most dx / 2.
  x = np.array([[1.27, 0.5, -0.013, 0.0] * 8], np.float32)
  q, dx, _, _ = int8_blocks.quantize_rows(x)
  error = int8_blocks.rounding_error(x)
  expected = x.astype(np.float64) - q.reshape(1, 32) * np.float64(dx[0, 0])
  np.testing.assert_array_equal(error, expected.astype(np.float32))
  assert error[0, 3] == 0 and error[0, 1] != 0 and np.abs(error).max() <= dx[0, 0] / 2


@pytest.mark.parametrize("format", ["q8_0", "q4_1"])
def test_without_the_kernel_xla_computes_two_passes(monkeypatch, format):
  rng = np.random.default_rng(12)
  _, two, _ = _both(rng, format, 48, 64)
  x = rng.standard_normal((70, 64)).astype(np.float32)  # more rows than one kernel call takes
  reference = int8_blocks.reference_matmul(x, np.asarray(two.packed), format, 48, passes=2)
  if native.kernel_available():
    np.testing.assert_array_equal(jax.jit(int8_blocks.matmul)(x, two), reference)
  monkeypatch.setenv(native.ENV_VARIABLE, "xla")
  product = jax.jit(lambda x, m: int8_blocks.matmul(x, m))  # traced anew: the kernel is off
  assert "specsample_int8" not in product.lower(x, two).as_text()
  tolerance = dict(rtol=1e-5, atol=1e-5 * np.abs(reference).max())
  np.testing.assert_allclose(product(x, two), reference, **tolerance)


def test_selected_rows_are_multiplied_as_their_matrix():
  one, two, _ = _both(np.random.default_rng(13), "q8_0", 40, 64)
  assert int8_blocks.select_rows(two, [3, 1]).passes == 2
  assert int8_blocks.select_rows(one, [3, 1]).passes == 1


def test_bad_passes_are_refused():
  with pytest.raises(ValueError, match=r"activation passes must be one of \(1, 2\), got 3"):
    int8_blocks.from_gguf_blocks(np.zeros((2, 34), np.uint8), "q8_0", passes=3)


def test_a_gguf_model_with_activations_in_two_passes(tmp_path):
  path = tmp_path / "tiny.gguf"
  write_tiny(path, Q.Q4_1, s=LARGE, seed=5)
  exact = load_model(path, gguf_blocks=True, cache_dtype="bfloat16")
  one = load_model(path, gguf_blocks=True, activations="int8")
  two = load_model(path, gguf_blocks=True, activations="int8x2")
  assert activations(two) == "int8x2" and activations(one) == "int8"
  assert two.config.cache_dtype == "bfloat16"  # as under one pass
  layer = two.params["blocks_0"]
  assert decoder_layer.applies(two.config, layer) == native.kernel_available()
  assert all(layer[name]["kernel"].passes == 2 for name in decoder_layer.PROJECTIONS)
  tokens = jnp.asarray(np.random.default_rng(4).integers(3, LARGE["vocab"], (2, 5)), jnp.int32)
  reference = extend_logits(exact, tokens)
  error_one = np.linalg.norm(extend_logits(one, tokens) - reference)
  error_two = np.linalg.norm(extend_logits(two, tokens) - reference)
  assert 0 < error_two < error_one / 20
  # Speculative greedy output equals plain greedy output of the two-pass arithmetic.
  speculative_and_plain(two, LARGE["vocab"])
  with pytest.raises(ValueError, match="activations='int8x2' needs gguf_blocks=True"):
    load_model(path, activations="int8x2")


def test_accelerators_lower_the_two_pass_layer_to_xla(tmp_path):
  """The fused layer's own fallback (`decoder_layer`: other platforms) traces with two
  passes: lowered for a TPU, the step has no custom call of ours; for the CPU, it has."""
  path = tmp_path / "tiny.gguf"
  write_tiny(path, Q.Q4_1, s=LARGE, seed=5)
  model = load_model(path, gguf_blocks=True, activations="int8x2")
  prompts = jnp.ones((1, 6), jnp.int32)
  state, _ = model.init_state(prompts, jnp.full((1,), 6, jnp.int32), 16)
  step = jax.jit(
    lambda model, state, tokens: model.extend(state, tokens, jnp.zeros((1,), jnp.int32))
  )
  tokens = jnp.ones((1, 3), jnp.int32)
  for platform in ("tpu", "cpu"):
    text = step.trace(model, state, tokens).lower(lowering_platforms=(platform,)).as_text()
    assert ("specsample_int8" in text) == (platform == "cpu" and native.kernel_available())
