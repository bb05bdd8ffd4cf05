"""GGUF block weights multiplied with 8-bit activations and integer dot products.

`pack(blocks, format)` repacks a GGUF matrix (Q8_0, Q4_0, Q4_1, Q5_0, Q4_K, Q6_K; [out, in],
the file's bytes) into an `Int8BlockMatrix`, and `matmul(x, matrix)` computes x @ W.T the
way llama.cpp does, with each row of x quantized to 8 bits:

1. each row of x, on its own, in blocks of 32 numbers: dx = max |x| / 127, q = x * (1 / dx)
   rounded to the nearest integer (ties to even), int8 (`quantize_rows`; a block holding a
   NaN has dx NaN, so its row's products are NaN);
2. per block of 32 weights, the integer sum isum = sum_i (u_i - offset) * q_i of the
   weights' stored unsigned values u (Q8_0: int8 + 128, offset 128; Q4_0: offset 8; Q4_1
   and Q4_K: 0; Q5_0: 16; Q6_K: 32, and its two groups of 16 multiplied by their int8
   scales), exact in int32;
3. out = fma(float32(isum), float32(S * dx), out), and for Q4_1 / Q4_K then
   out = fma(M, float32(dx * float32(sum q)), out), over the blocks in order, float32:
   S is the block's scale (Q8_0 / Q4_x / Q5_0: d; Q4_K: d * sc; Q6_K: d) and M its
   minimum (Q4_1: m; Q4_K: -(dmin * m)).

So a product's numbers depend only on its row of x and of W: the same whatever the number
of rows in the call (a verify call's rows equal plain decoding's, bit for bit) and
whatever the instruction set (AVX-512 VNNI, AVX-VNNI or AVX2's vpmaddubsw: integer sums
are exact, the float steps the same). `reference_matmul` is that arithmetic in NumPy, equal
to the kernel bit for bit. This is not the float32 product of the dequantized weights (the
activations are rounded); `blocks.matmul` keeps that one.

The packed layout (`int8_layout`) puts 16 rows of W side by side, so that one vector load
gives one lane per row of W.

On CPU the product goes to the kernel (small_k_matmul.cc, int8_matmul.h) for any number of
rows (calls of up to small_k.MAX_ROWS); elsewhere (other platforms, no kernel,
SPECSAMPLE_MATMUL=xla) XLA multiplies the dequantized activations and weights, which
equals the same arithmetic up to float32 rounding.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from specsample.kernels import native, small_k
from specsample.kernels.blocks import BLOCK_WEIGHTS, FORMATS
from specsample.kernels.int8_layout import (
  GROUP_ROWS,
  PACKED_BYTES,
  dequantize_unpacked,
  pack,
  to_gguf_blocks,
  unpack,
)

ACTIVATION_PASSES = (1, 2)  # one 8-bit pass, or a second over the first's rounding error
_TARGET = "specsample_int8_matmul_"  # + format
_GREEDY_TARGET = "specsample_int8_greedy_"  # + format


@functools.partial(
  jax.tree_util.register_dataclass,
  data_fields=["packed"],
  meta_fields=["format", "rows", "passes"],
)
@dataclasses.dataclass(frozen=True)
class Int8BlockMatrix:
  """An [out, in] weight matrix in a GGUF block format, packed for 8-bit activations.

  packed: uint8 [ceil(out / 16), in / BLOCK_WEIGHTS[format] * PACKED_BYTES[format]] (numpy
  or jax); format: one of FORMATS; rows: out (the last group may be partly padding);
  passes: how activations are quantized, 1 (8 bits per number, in blocks of 32) or 2 (the
  first pass's rounding error quantized again, both partial products added: about 15 bits
  per number, at the cost of twice the rows in the integer products).
  """

  packed: jax.Array  # a pytree leaf
  format: str  # static
  rows: int  # static
  passes: int = 1  # static

  def __post_init__(self):
    if self.format not in PACKED_BYTES:
      raise ValueError(f"block format must be one of {FORMATS}, got {self.format!r}")
    if self.passes not in ACTIVATION_PASSES:
      raise ValueError(f"activation passes must be one of {ACTIVATION_PASSES}, got {self.passes!r}")
    shape = getattr(self.packed, "shape", None)  # None: a placeholder leaf (jax.tree ops)
    if shape is not None and (
      len(shape) != 2
      or shape[0] != -(-self.rows // GROUP_ROWS)
      or shape[1] % PACKED_BYTES[self.format]
    ):
      raise ValueError(
        f"packed {self.format} matrix of {self.rows} rows: expected uint8 "
        f"[{-(-self.rows // GROUP_ROWS)}, in / {BLOCK_WEIGHTS[self.format]} * "
        f"{PACKED_BYTES[self.format]}], got shape {tuple(shape)}"
      )

  @property
  def shape(self) -> tuple[int, int]:
    """(out, in): the matrix's shape, as a float array of it would have."""
    columns = self.packed.shape[1] // PACKED_BYTES[self.format] * BLOCK_WEIGHTS[self.format]
    return self.rows, columns

  @property
  def nbytes(self) -> int:
    return math.prod(self.packed.shape)

  def matmul(self, x: jax.Array) -> jax.Array:
    """x @ W.T with 8-bit activations: [..., in] -> [..., out] (`matmul`)."""
    return matmul(x, self)

  def take_rows(self, ids: jax.Array) -> jax.Array:
    """Rows ids int[...] of W, dequantized: -> float32 [..., in] (`take_rows`)."""
    return take_rows(self, ids)


def select_rows(matrix: Int8BlockMatrix, ids) -> Int8BlockMatrix:
  """The rows `ids` (int [m]) of the matrix, packed as a matrix of their own (a reduced
  output layer: a draft's kept tokens), multiplied as the matrix is (its passes)."""
  raw = to_gguf_blocks(np.asarray(matrix.packed), matrix.format, matrix.rows)
  return from_gguf_blocks(raw[np.asarray(ids)], matrix.format, matrix.passes)


def from_gguf_blocks(blocks: np.ndarray, format: str, passes: int = 1) -> Int8BlockMatrix:
  """An Int8BlockMatrix of a GGUF matrix's bytes (numpy uint8 [out, row bytes]), on the
  device, multiplied with activations quantized in `passes` passes."""
  packed = jnp.asarray(pack(blocks, format))
  return Int8BlockMatrix(packed, format, int(blocks.shape[0]), passes)


def dequantize(matrix: Int8BlockMatrix) -> jax.Array:
  """The matrix as float32 [out, in] (equal to the gguf package's dequantization)."""
  w = dequantize_unpacked(unpack(jnp.asarray(matrix.packed), matrix.format, jnp), jnp)
  return w.reshape(-1, w.shape[-1])[: matrix.rows]


_SLICED_LOOKUPS = 16  # lookups of up to this many rows slice each row's group


def take_rows(matrix: Int8BlockMatrix, ids: jax.Array) -> jax.Array:
  """Rows `ids` int32[...] of the matrix (an embedding lookup) -> float32 [..., in]: each
  row's group gathered and unpacked, its own lane taken, then only that row dequantized."""
  packed, group = jnp.asarray(matrix.packed), ids // GROUP_ROWS
  if group.size <= _SLICED_LOOKUPS:  # one slice each: XLA:CPU's gather is slower here
    slices = [jax.lax.dynamic_index_in_dim(packed, g, keepdims=False) for g in group.reshape(-1)]
    groups = jnp.stack(slices).reshape(*group.shape, packed.shape[-1])  # [..., bytes]
  else:
    groups = jnp.take(packed, group, axis=0)  # [..., bytes]
  u = unpack(groups, matrix.format, jnp)  # fields [..., 16, ...]
  lane = ids % GROUP_ROWS  # [...]

  def own(field):  # [..., 16, *rest] -> [..., 1, *rest]: the row's lane
    if field is None:
      return None
    index = lane.reshape(*lane.shape, 1, *(1,) * (field.ndim - lane.ndim - 1))
    return jnp.take_along_axis(field, index, axis=lane.ndim)

  u = dataclasses.replace(
    u,
    values=own(u.values),
    scale=own(u.scale),
    minimum=own(u.minimum),
    int_scales=own(u.int_scales),
  )
  return dequantize_unpacked(u, jnp)[..., 0, :]


# ---------------------------------------------------------------------------------------
# The arithmetic in NumPy (the kernel's numbers, bit for bit).


def quantize_rows(x: np.ndarray):
  """float32 [k, d] -> (q int8 [k, d / 32, 32], dx float32 [k, d / 32], s16 int32
  [k, d / 32, 2] (the sums of each 16 q's), dxs float32 [k, d / 32] = dx * float32(sum q))."""
  x = np.asarray(x, np.float32)
  k, d = x.shape
  xb = x.reshape(k, d // 32, 32)
  dx = np.max(np.abs(xb), axis=-1) / np.float32(127)
  inverse = np.divide(np.float32(1), dx, out=np.zeros_like(dx), where=dx != 0)
  q = np.rint(xb * inverse[..., None]).astype(np.int32)
  s16 = q.reshape(k, d // 32, 2, 16).sum(axis=-1, dtype=np.int32)
  dxs = dx * s16.sum(axis=-1).astype(np.float32)
  return q.astype(np.int8), dx, s16, dxs


def rounding_error(x: np.ndarray) -> np.ndarray:
  """float32 [k, d] -> what one 8-bit pass leaves of it, float32 [k, d]: e = x - dx q
  rounded once (the kernel's fma(-q, dx, x); q dx is exact in float64, and so is x - q dx,
  |x - q dx| <= dx / 2 being of x's magnitude)."""
  x = np.asarray(x, np.float32)
  k, d = x.shape
  q, dx, _, _ = quantize_rows(x)
  approx = q.astype(np.float64) * dx[..., None].astype(np.float64)  # [k, d / 32, 32]
  return (x.reshape(k, d // 32, 32).astype(np.float64) - approx).astype(np.float32).reshape(k, d)


def _fma(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
  """float32 a * b + c rounded once (exact products in float64: 24 + 24 bits)."""
  return (a.astype(np.float64) * b.astype(np.float64) + c.astype(np.float64)).astype(np.float32)


def reference_matmul(
  x: np.ndarray, packed: np.ndarray, format: str, rows: int, passes: int = 1
) -> np.ndarray:
  """x float32 [k, in] @ W.T with W packed uint8 [groups, bytes] -> float32 [k, rows]:
  the kernel's arithmetic (module docstring) in NumPy; two passes add the product of x's
  rounding error (`rounding_error`) to the product of x, in float32."""
  if passes == 2:
    first = reference_matmul(x, packed, format, rows)
    return first + reference_matmul(rounding_error(x), packed, format, rows)
  q, dx, s16, dxs = quantize_rows(x)
  u = unpack(np.asarray(packed), format, np)
  values = u.values.reshape(-1, *u.values.shape[-2:])[:rows].astype(np.int64)  # [n, nb, 32]
  scale = u.scale.reshape(-1, u.scale.shape[-1])[:rows]  # [n, nb]
  q = q.astype(np.int64)
  if u.int_scales is not None:  # Q6_K: two groups of 16, each times its int8 scale
    sc = u.int_scales.reshape(-1, *u.int_scales.shape[-2:])[:rows].astype(np.int64)
    halves = [
      np.einsum("rbi,nbi->rnb", q[..., 16 * h : 16 * h + 16], values[..., 16 * h : 16 * h + 16])
      - u.offset * s16[:, None, :, h]
      for h in (0, 1)
    ]
    isum = halves[0] * sc[None, :, :, 0] + halves[1] * sc[None, :, :, 1]
  else:
    isum = np.einsum("rbi,nbi->rnb", q, values) - u.offset * s16.sum(-1)[:, None, :]
  isum = isum.astype(np.int32).astype(np.float32)  # [k, n, nb]
  block_scale = (scale[None, :, :] * dx[:, None, :]).astype(np.float32)
  minimum = None if u.minimum is None else u.minimum.reshape(-1, u.minimum.shape[-1])[:rows]
  out = np.zeros(isum.shape[:2], np.float32)
  for b in range(isum.shape[-1]):
    out = _fma(isum[..., b], block_scale[..., b], out)
    if minimum is not None:
      out = _fma(np.broadcast_to(minimum[None, :, b], out.shape), dxs[:, None, b], out)
  return out


# ---------------------------------------------------------------------------------------
# The product.


def uses_kernel(x_dtype) -> bool:
  """Whether a product with x of this dtype takes the kernel on CPU (decided at trace time)."""
  return native.enabled() and jnp.dtype(x_dtype) == jnp.float32


def xla_matmul(x: jax.Array, matrix: Int8BlockMatrix) -> jax.Array:
  """x @ W.T by XLA's operations (other platforms, no kernel, and the fused layer's own
  fallback): the same arithmetic up to float32 rounding, dequantized activations (one or
  two passes) times dequantized weights."""
  *lead, features = x.shape
  blocks_ = x.reshape(*lead, features // 32, 32).astype(jnp.float32)

  def quantized(blocks_):  # [..., nb, 32] -> the numbers one 8-bit pass keeps
    dx = jnp.max(jnp.abs(blocks_), axis=-1, keepdims=True) / 127.0
    inverse = jnp.where(dx != 0, 1.0 / jnp.where(dx != 0, dx, 1.0), 0.0)
    return jnp.round(blocks_ * inverse) * dx

  x_hat = quantized(blocks_)
  if matrix.passes == 2:
    x_hat = x_hat + quantized(blocks_ - x_hat)
  return jnp.einsum("...i,oi->...o", x_hat.reshape(x.shape), dequantize(matrix))


def _kernel_call(rows: jax.Array, matrix: Int8BlockMatrix) -> jax.Array:
  """[k, in] (k <= small_k.MAX_ROWS) -> [k, out]: the kernel on CPU, XLA elsewhere."""
  call = jax.ffi.ffi_call(
    _TARGET + matrix.format,
    jax.ShapeDtypeStruct((rows.shape[0], matrix.rows), jnp.float32),
    vmap_method="sequential",
  )

  def kernel(x, packed):
    return call(x, packed, passes=np.int32(matrix.passes))

  def xla(x, packed):
    return xla_matmul(x, dataclasses.replace(matrix, packed=packed))

  return jax.lax.platform_dependent(rows, matrix.packed, cpu=kernel, default=xla)


def matmul(x: jax.Array, matrix: Int8BlockMatrix) -> jax.Array:
  """x @ W.T for W = matrix [out, in], 8-bit activations.  [..., in] -> [..., out], float32."""
  out, features = matrix.shape
  if x.shape[-1] != features:
    raise ValueError(f"int8 block matmul: x {x.shape} against a [{out}, {features}] matrix")
  if not uses_kernel(x.dtype):
    return xla_matmul(x, matrix)
  y = _in_calls(_kernel_call, x.reshape(-1, features), matrix)  # [rows, out]
  return y.reshape(*x.shape[:-1], out)


def _in_calls(call, rows: jax.Array, matrix: Int8BlockMatrix):
  """call(rows, matrix) over rows [k, in] in calls of up to small_k.MAX_ROWS rows, the
  results (arrays [rows, ...] or tuples of them) joined along the rows."""
  step = small_k.MAX_ROWS
  parts = [call(rows[i : i + step], matrix) for i in range(0, rows.shape[0], step)]
  if len(parts) == 1:
    return parts[0]
  return jax.tree.map(lambda *chunks: jnp.concatenate(chunks, axis=0), *parts)


# ---------------------------------------------------------------------------------------
# What greedy drafting reads of a product, without its logits.


def _greedy_of_logits(y: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
  """(argmax int32, max, softmax at the max) of logits [..., n] over the last axis."""
  best = jnp.max(y, axis=-1)
  top = 1.0 / jnp.sum(jnp.exp(y - best[..., None]), axis=-1)
  return jnp.argmax(y, axis=-1).astype(jnp.int32), best, top


def _greedy_kernel_call(rows: jax.Array, matrix: Int8BlockMatrix):
  """[k, in] (k <= small_k.MAX_ROWS) -> (token int32[k], best [k], top [k])."""
  k = rows.shape[0]
  call = jax.ffi.ffi_call(
    _GREEDY_TARGET + matrix.format,
    (
      jax.ShapeDtypeStruct((k,), jnp.int32),
      jax.ShapeDtypeStruct((k,), jnp.float32),
      jax.ShapeDtypeStruct((k,), jnp.float32),
    ),
    vmap_method="sequential",
  )

  def kernel(x, packed):
    return tuple(call(x, packed, passes=np.int32(matrix.passes), n=np.int64(matrix.rows)))

  def xla(x, packed):
    return _greedy_of_logits(xla_matmul(x, dataclasses.replace(matrix, packed=packed)))

  return jax.lax.platform_dependent(rows, matrix.packed, cpu=kernel, default=xla)


def greedy_matmul(x: jax.Array, matrix: Int8BlockMatrix) -> tuple[jax.Array, jax.Array, jax.Array]:
  """What greedy drafting reads of y = matmul(x, matrix), row by row, without returning y:
  (token int32[...], best float32[...], top float32[...]) for x [..., in]: the lowest index
  of y's largest number, that number, and softmax(y) there (1 / sum exp(y - best)). On CPU
  one kernel call computes the product and these three (greedy_summary_simd.h), so a
  draft's greedy step needs no XLA reductions over its logits. A row whose y has a NaN or
  an infinite maximum has best NaN or infinite: the caller flags it (its token and top
  are then unspecified)."""
  out, features = matrix.shape
  if x.shape[-1] != features:
    raise ValueError(f"int8 block greedy matmul: x {x.shape} against a [{out}, {features}] matrix")
  if not uses_kernel(x.dtype):
    return _greedy_of_logits(xla_matmul(x, matrix))
  joined = _in_calls(_greedy_kernel_call, x.reshape(-1, features), matrix)  # [rows] each
  return tuple(a.reshape(x.shape[:-1]) for a in joined)
