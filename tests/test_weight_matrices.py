"""Every form of a weight matrix multiplies itself (kernels.matrices.WeightMatrix): plain
[in, out] kernels, plain [out, in] rows, GGUF blocks and their 8-bit repacking give the
same product, rows and bytes as the matrix they hold."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from specsample.kernels import blocks, int8_blocks
from specsample.kernels.matrices import (
  DenseKernel,
  DenseRows,
  WeightMatrix,
  is_block_matrix,
  weight_matrix,
)
from specsample.models.layers import dense, dense_transposed
from specsample.models.weights import q8_0_blocks

OUT, IN = 48, 64


def _matrix(seed: int = 0) -> np.ndarray:
  return np.random.default_rng(seed).normal(size=(OUT, IN)).astype(np.float32)  # W [out, in]


def _forms(w: np.ndarray) -> dict[str, tuple[WeightMatrix, np.ndarray]]:
  """Each form of W -> (the form, the float32 W it multiplies by)."""
  q8 = q8_0_blocks(w)
  block = blocks.BlockMatrix(jnp.asarray(q8), "q8_0")
  rounded = np.asarray(blocks.dequantize(block))  # W as the blocks hold it
  return {
    "kernel": (weight_matrix(jnp.asarray(w.T)), w),
    "rows": (weight_matrix(jnp.asarray(w), "out_in"), w),
    "blocks": (weight_matrix(block), rounded),
    "int8 blocks": (weight_matrix(int8_blocks.from_gguf_blocks(q8, "q8_0")), rounded),
  }


@pytest.mark.parametrize("form", ["kernel", "rows", "blocks", "int8 blocks"])
def test_each_form_is_a_weight_matrix_with_its_shape_rows_and_product(form):
  w = _matrix()
  matrix, held = _forms(w)[form]
  assert isinstance(matrix, WeightMatrix)
  assert matrix.shape == (OUT, IN)
  ids = jnp.asarray([[3, 0], [47, 3]])
  np.testing.assert_array_equal(np.asarray(matrix.take_rows(ids), np.float32), held[ids])
  x = np.random.default_rng(1).normal(size=(2, 3, IN)).astype(np.float32)
  y = np.asarray(matrix.matmul(jnp.asarray(x)))
  assert y.shape == (2, 3, OUT)
  if form == "int8 blocks":  # x rounded to 8 bits per block of 32: the kernel's arithmetic
    rows = x.reshape(-1, IN)
    expected = int8_blocks.reference_matmul(rows, np.asarray(matrix.packed), "q8_0", OUT)
    expected = expected.reshape(2, 3, OUT)
  else:
    expected = x @ held.T
  np.testing.assert_allclose(y, expected, atol=1e-4, rtol=1e-4)


def test_bytes_are_those_stored():
  w = _matrix()
  forms = _forms(w)
  assert forms["kernel"][0].nbytes == forms["rows"][0].nbytes == OUT * IN * 4
  assert weight_matrix(jnp.asarray(w, jnp.bfloat16), "out_in").nbytes == OUT * IN * 2
  assert forms["blocks"][0].nbytes == OUT * IN // 32 * 34  # Q8_0: 34 bytes per 32 weights


def test_layers_ask_the_matrix_whatever_its_form():
  w = _matrix(2)
  x = jnp.asarray(np.random.default_rng(3).normal(size=(5, IN)), jnp.float32)
  np.testing.assert_array_equal(dense(x, jnp.asarray(w.T)), DenseKernel(jnp.asarray(w.T)).matmul(x))
  np.testing.assert_array_equal(
    dense_transposed(x, jnp.asarray(w)), DenseRows(jnp.asarray(w)).matmul(x)
  )
  block = _forms(w)["blocks"][0]
  np.testing.assert_array_equal(dense(x, block), block.matmul(x))  # blocks: [out, in] either way
  np.testing.assert_array_equal(dense_transposed(x, block), block.matmul(x))


def test_plain_arrays_are_wrapped_by_layout_and_block_matrices_are_themselves():
  w = jnp.asarray(_matrix())
  assert isinstance(weight_matrix(w), DenseKernel)
  assert isinstance(weight_matrix(w, "out_in"), DenseRows)
  block = _forms(np.asarray(w))["blocks"][0]
  assert weight_matrix(block, "in_out") is block and is_block_matrix(block)
  assert not is_block_matrix(w)
  with pytest.raises(ValueError, match="layout"):
    weight_matrix(w, "rows")
  with pytest.raises(ValueError, match="two axes"):
    weight_matrix(jnp.zeros((2, 3, 4)))
