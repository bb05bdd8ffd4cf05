"""What a layer asks of a weight matrix, whatever the matrix is stored as.

A weight matrix W is a linear map [in] -> [out]. `WeightMatrix` is what every form of one
gives: its [out, in] shape, the bytes a call reads (`nbytes`), the product `matmul(x)` =
x @ W.T ([..., in] -> [..., out]) and `take_rows(ids)`, W's rows (an embedding's lookup).
Each form computes its own product:

- `DenseKernel`: a float32 or bfloat16 [in, out] array (a projection's kernel, T5X's
  layout), multiplied by `small_k.matmul`;
- `DenseRows`: a float32 or bfloat16 [out, in] array (an embedding, an output layer's
  rows), multiplied by `small_k.matmul_transposed`;
- `blocks.BlockMatrix`: GGUF blocks, [out, in], `blocks.matmul` (float32 arithmetic);
- `int8_blocks.Int8BlockMatrix`: GGUF blocks repacked, [out, in], `int8_blocks.matmul`
  (8-bit activations).

Parameters hold plain arrays and block matrices; `weight_matrix(stored, layout)` gives
the `WeightMatrix` of one (block matrices are one already, arrays are wrapped by their
layout), so a layer calls `weight_matrix(kernel).matmul(x)` and never asks which it is.
"""

from __future__ import annotations

import dataclasses
from typing import Protocol, runtime_checkable

import jax
import jax.numpy as jnp

from specsample.kernels import small_k
from specsample.kernels.blocks import BlockMatrix
from specsample.kernels.int8_blocks import Int8BlockMatrix

# The matrices kept in GGUF blocks, either arithmetic.
BLOCK_MATRICES = (BlockMatrix, Int8BlockMatrix)
LAYOUTS = ("in_out", "out_in")  # how a plain array holds W: [in, out] or [out, in]


@runtime_checkable
class WeightMatrix(Protocol):
  """A weight matrix W [out, in] that multiplies itself."""

  @property
  def shape(self) -> tuple[int, int]:
    """[out, in]."""
    ...

  @property
  def nbytes(self) -> int:
    """The bytes of W as stored: what a product reads."""
    ...

  def matmul(self, x: jax.Array) -> jax.Array:
    """x @ W.T.  [..., in] -> [..., out], float32 for float32 x."""
    ...

  def take_rows(self, ids: jax.Array) -> jax.Array:
    """W's rows ids int[...] -> [..., in] (float32 where W is in blocks; else W's dtype)."""
    ...


@dataclasses.dataclass(frozen=True)
class _PlainArray:
  array: jax.Array  # [in, out] or [out, in], as the form says

  @property
  def nbytes(self) -> int:
    return self.array.size * self.array.dtype.itemsize


@dataclasses.dataclass(frozen=True)
class DenseKernel(_PlainArray):
  """W held as a plain [in, out] array (a projection's kernel)."""

  @property
  def shape(self) -> tuple[int, int]:
    return self.array.shape[1], self.array.shape[0]

  def matmul(self, x: jax.Array) -> jax.Array:
    return small_k.matmul(x, self.array)

  def take_rows(self, ids: jax.Array) -> jax.Array:
    return jnp.moveaxis(jnp.take(self.array, ids, axis=1), 0, -1)  # [..., in]


@dataclasses.dataclass(frozen=True)
class DenseRows(_PlainArray):
  """W held as a plain [out, in] array (an embedding table, a tied output layer): its
  product reads the rows in memory order, never copying W transposed."""

  @property
  def shape(self) -> tuple[int, int]:
    return self.array.shape[0], self.array.shape[1]

  def matmul(self, x: jax.Array) -> jax.Array:
    return small_k.matmul_transposed(x, self.array)

  def take_rows(self, ids: jax.Array) -> jax.Array:
    return jnp.take(self.array, ids, axis=0)


def is_block_matrix(leaf) -> bool:
  """Whether a parameter leaf is a matrix kept in GGUF blocks (either arithmetic)."""
  return isinstance(leaf, BLOCK_MATRICES)


def weight_matrix(stored, layout: str = "in_out") -> WeightMatrix:
  """The `WeightMatrix` of a stored parameter: a block matrix itself (always [out, in]),
  a plain 2-D array wrapped as `layout` says ("in_out": a kernel, "out_in": rows)."""
  if is_block_matrix(stored):
    return stored
  if layout not in LAYOUTS:
    raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
  if getattr(stored, "ndim", None) != 2:
    raise ValueError(f"a weight matrix has two axes, got shape {getattr(stored, 'shape', None)}")
  return DenseKernel(stored) if layout == "in_out" else DenseRows(stored)
