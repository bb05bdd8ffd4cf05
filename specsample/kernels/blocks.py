"""Weight matrices in GGUF's block formats (Q8_0, Q4_0, Q4_1, Q5_0, Q4_K, Q6_K), as blocks.

A GGUF file stores each row of an [out, in] matrix (one output's weights) as blocks: for
Q8_0/Q4_0/Q4_1/Q5_0 32 weights each, a float16 scale d, for Q4_1 a float16 minimum m, and
the quantized numbers q (int8 for Q8_0; 4 bits for Q4_x; 5 for Q5_0). Weight i of a block
is d * q_i (Q8_0), d * (q_i - 8) (Q4_0), d * q_i + m (Q4_1) or d * (q_i - 16) (Q5_0):
1.06, 0.56, 0.63 and 0.69 bytes per weight, against 4 for float32 (Q5_0 is what K-quant
files use for rows that are not multiples of 256). The K-quants take 256 weights per
block, in sub-blocks with their own scales: Q4_K (8 x 32 weights, 6-bit scales and
minimums, (d * sc) * q - dmin * m, 0.56 bytes per weight) and Q6_K (16 x 16 weights, int8
scales, (d * sc) * (q - 32) for 6-bit q, 0.82 bytes per weight), what llama.cpp's Q4_K_M
files hold. `BlockMatrix` holds such a matrix as the file has it (uint8 [out, in / weights
per block * block bytes]); `matmul(x, matrix)` is x @ W.T ([..., in] -> [..., out]).

On CPU, products of up to `BLOCK_ROW_LIMIT` rows go to the small-k kernel
(small_k_matmul.h: the transposed kernel's tiles, each block dequantized in registers, in
calls of up to small_k.MAX_ROWS rows): the weights it multiplies equal the gguf package's
float32 dequantization bit for bit (computed as the gguf package does: d * q exact for
Q8_0/Q4_x/Q5_0 and Q4_K, (d * sc) * q rounded once for Q6_K), its sums are those of the
float32 transposed kernel (the product equals `small_k.matmul_transposed(x,
dequantize(matrix))` bit for bit), and every row is summed as if alone, so plain decoding
and verification agree. Elsewhere (more rows, other platforms, no kernel,
SPECSAMPLE_MATMUL=xla) the matrix is dequantized with jnp and multiplied by XLA.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from specsample.kernels import native, small_k

# Bytes (ggml's block_q*) and weights per block.
BLOCK_BYTES = {"q8_0": 34, "q4_0": 18, "q4_1": 20, "q5_0": 22, "q4_k": 144, "q6_k": 210}
BLOCK_WEIGHTS = {"q8_0": 32, "q4_0": 32, "q4_1": 32, "q5_0": 32, "q4_k": 256, "q6_k": 256}
FORMATS = tuple(BLOCK_BYTES)
# The most rows a product takes the kernel with (in calls of small_k.MAX_ROWS rows): up to
# here the kernel beats dequantizing for XLA, and a verification call of a batch stays
# row-count invariant with the plain steps.
BLOCK_ROW_LIMIT = 256
_TARGET = "specsample_small_k_matmul_"  # + format


@functools.partial(jax.tree_util.register_dataclass, data_fields=["blocks"], meta_fields=["format"])
@dataclasses.dataclass(frozen=True)
class BlockMatrix:
  """An [out, in] weight matrix in a GGUF block format, as the file stores it.

  blocks: uint8 [out, in / BLOCK_WEIGHTS[format] * BLOCK_BYTES[format]] (numpy or jax), each
  row of the matrix its blocks in order; format: one of FORMATS ("q8_0", ..., "q6_k").
  """

  blocks: jax.Array  # a pytree leaf
  format: str  # static (part of the tree structure)

  def __post_init__(self):
    if self.format not in BLOCK_BYTES:
      raise ValueError(f"block format must be one of {FORMATS}, got {self.format!r}")
    shape = getattr(self.blocks, "shape", None)  # None: a placeholder leaf (jax.tree ops)
    if shape is not None and (len(shape) != 2 or shape[1] % BLOCK_BYTES[self.format]):
      raise ValueError(
        f"{self.format} blocks: expected uint8 [out, in / {BLOCK_WEIGHTS[self.format]} * "
        f"{BLOCK_BYTES[self.format]}], "
        f"got shape {tuple(shape)}"
      )

  @property
  def shape(self) -> tuple[int, int]:
    """(out, in): the matrix's shape, as a float array of it would have."""
    out, row_bytes = self.blocks.shape
    return out, row_bytes // BLOCK_BYTES[self.format] * BLOCK_WEIGHTS[self.format]

  @property
  def nbytes(self) -> int:
    return math.prod(self.blocks.shape)

  def matmul(self, x: jax.Array) -> jax.Array:
    """x @ W.T: [..., in] -> [..., out] (`matmul`)."""
    return matmul(x, self)

  def take_rows(self, ids: jax.Array) -> jax.Array:
    """Rows ids int[...] of W, dequantized: -> float32 [..., in] (`take_rows`)."""
    return take_rows(self, ids)


def _halves(blocks: jax.Array, offset: int) -> jax.Array:
  """The float16 at byte `offset` of each block as float32.  [..., bytes] -> [..., 1]."""
  bits = blocks[..., offset].astype(jnp.uint16) | (blocks[..., offset + 1].astype(jnp.uint16) << 8)
  return jax.lax.bitcast_convert_type(bits, jnp.float16).astype(jnp.float32)[..., None]


def dequantize(matrix: BlockMatrix) -> jax.Array:
  """The matrix as float32 [out, in] (equal to the gguf package's dequantization)."""
  return dequantize_rows(matrix.blocks, matrix.format)


def dequantize_rows(blocks: jax.Array, format: str) -> jax.Array:
  """uint8 [..., in / weights per block * block bytes] rows of blocks -> float32 [..., in]."""
  size = BLOCK_BYTES[format]
  *lead, row_bytes = blocks.shape
  b = jnp.asarray(blocks).reshape(*lead, row_bytes // size, size)  # [..., blocks, bytes]
  if format == "q4_k":
    values = _q4_k_values(b)
  elif format == "q6_k":
    values = _q6_k_values(b)
  elif format == "q5_0":
    values = _halves(b, 0) * _q5_0_values(b)
  elif format == "q8_0":
    values = _halves(b, 0) * jax.lax.bitcast_convert_type(b[..., 2:], jnp.int8).astype(jnp.float32)
  else:
    d = _halves(b, 0)
    packed = b[..., 4:] if format == "q4_1" else b[..., 2:]  # [..., blocks, 16]
    q = jnp.concatenate([packed & 0xF, packed >> 4], axis=-1).astype(jnp.float32)
    values = d * q + _halves(b, 2) if format == "q4_1" else d * (q - 8.0)
  return values.reshape(*lead, row_bytes // size * BLOCK_WEIGHTS[format])


def _q5_0_values(b: jax.Array) -> jax.Array:
  """Q5_0 blocks uint8 [..., 22] -> q - 16 as float32 [..., 32] (gguf's Q5_0)."""
  high_bits = b[..., 2:6].astype(jnp.uint32)  # qh, little-endian: bit i for weight i
  qh = high_bits[..., 0] | high_bits[..., 1] << 8 | high_bits[..., 2] << 16
  qh = qh | high_bits[..., 3] << 24
  fifth = (qh[..., None] >> jnp.arange(32, dtype=jnp.uint32)) & 1  # [..., 32]
  packed = b[..., 6:]  # [..., 16]
  low = jnp.concatenate([packed & 0xF, packed >> 4], axis=-1).astype(jnp.uint32)
  return ((low | fifth << 4).astype(jnp.int32) - 16).astype(jnp.float32)


def _q4_k_values(b: jax.Array) -> jax.Array:
  """Q4_K blocks uint8 [..., 144] -> float32 [..., 256] (gguf's Q4_K.dequantize_blocks)."""
  packed = b[..., 4:16].astype(jnp.int32)  # the 6-bit scales and minimums
  low, mid, high = packed[..., 0:4], packed[..., 4:8], packed[..., 8:12]
  sc = jnp.concatenate([low & 63, (high & 0xF) | ((low >> 2) & 0x30)], axis=-1)  # [..., 8]
  mins = jnp.concatenate([mid & 63, (high >> 4) | ((mid >> 2) & 0x30)], axis=-1)  # [..., 8]
  scale = (_halves(b, 0) * sc.astype(jnp.float32))[..., None]  # [..., 8, 1], exact
  minimum = (_halves(b, 2) * mins.astype(jnp.float32))[..., None]
  qs = b[..., 16:].reshape(*b.shape[:-1], 4, 1, 32)  # chunks of 32 bytes: low, high nibbles
  q = jnp.concatenate([qs & 0xF, qs >> 4], axis=-2).reshape(*b.shape[:-1], 8, 32)
  return (scale * q.astype(jnp.float32) - minimum).reshape(*b.shape[:-1], 256)


def _q6_k_values(b: jax.Array) -> jax.Array:
  """Q6_K blocks uint8 [..., 210] -> float32 [..., 256] (gguf's Q6_K.dequantize_blocks)."""
  lead = b.shape[:-1]
  ql = b[..., 0:128].reshape(*lead, 2, 64)  # per half of 128 weights
  qh = b[..., 128:192].reshape(*lead, 2, 32)
  low = jnp.concatenate([ql & 0xF, ql >> 4], axis=-1)  # [..., 2, 128]
  high = jnp.concatenate([(qh >> s) & 3 for s in (0, 2, 4, 6)], axis=-1)  # [..., 2, 128]
  q = (low | (high << 4)).astype(jnp.int32) - 32
  sc = jax.lax.bitcast_convert_type(b[..., 192:208], jnp.int8).astype(jnp.float32)  # [..., 16]
  scale = (_halves(b, 208) * sc)[..., None]  # [..., 16, 1], exact
  return (scale * q.reshape(*lead, 16, 16).astype(jnp.float32)).reshape(*lead, 256)


def take_rows(matrix: BlockMatrix, ids: jax.Array) -> jax.Array:
  """Rows `ids` int32[...] of the matrix (an embedding lookup) -> float32 [..., in]."""
  return dequantize_rows(jnp.take(jnp.asarray(matrix.blocks), ids, axis=0), matrix.format)


def uses_kernel(x_shape: tuple[int, ...], x_dtype) -> bool:
  """Whether a product with these x takes the kernel on CPU (decided at trace time)."""
  rows = math.prod(x_shape[:-1])
  return native.enabled() and jnp.dtype(x_dtype) == jnp.float32 and 1 <= rows <= BLOCK_ROW_LIMIT


def _kernel_call(rows: jax.Array, matrix: BlockMatrix) -> jax.Array:
  """[k, in] (k <= small_k.MAX_ROWS) -> [k, out]: the kernel on CPU, XLA elsewhere."""
  call = jax.ffi.ffi_call(
    _TARGET + matrix.format,
    jax.ShapeDtypeStruct((rows.shape[0], matrix.shape[0]), jnp.float32),
    vmap_method="sequential",
  )

  def xla(x, blocks):
    return _xla_matmul(x, BlockMatrix(blocks, matrix.format))

  return jax.lax.platform_dependent(rows, matrix.blocks, cpu=call, default=xla)


def _xla_matmul(x: jax.Array, matrix: BlockMatrix) -> jax.Array:
  return jnp.einsum("...i,oi->...o", x, dequantize(matrix).astype(x.dtype))


def matmul(x: jax.Array, matrix: BlockMatrix) -> jax.Array:
  """x @ W.T for W = matrix [out, in].  [..., in] -> [..., out], x's dtype."""
  out, features = matrix.shape
  if x.shape[-1] != features:
    raise ValueError(f"block matmul: x {x.shape} against a [{out}, {features}] matrix")
  if not uses_kernel(x.shape, x.dtype):
    return _xla_matmul(x, matrix)
  rows = x.reshape(-1, features)  # [rows, in]
  step = small_k.MAX_ROWS
  parts = [_kernel_call(rows[i : i + step], matrix) for i in range(0, rows.shape[0], step)]
  y = parts[0] if len(parts) == 1 else jnp.concatenate(parts, axis=0)
  return y.reshape(*x.shape[:-1], out)


def from_numpy(blocks: np.ndarray, format: str) -> BlockMatrix:
  """A BlockMatrix of a uint8 numpy array (e.g. a GGUF tensor's data), on the device."""
  array = np.ascontiguousarray(blocks)
  if array.dtype != np.uint8:
    raise ValueError(f"blocks must be uint8, got {array.dtype}")
  return BlockMatrix(jnp.asarray(array), format)
