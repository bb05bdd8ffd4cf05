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

The packed layout puts 16 rows of W side by side (a group): per block of 32 weights,
64-byte chunks hold 4 consecutive stored values of each of the 16 rows (vector v: weights
4v..4v+3, as nibbles for the 4-bit formats: low nibble vector c, high nibble vector 4 + c),
then the scales (float16 d, Q4_1's m; Q5_0's fifth bits as 64-bit masks; Q4_K's d, dmin
and 6-bit scales and minimums as bytes; Q6_K's high bit pairs and int8 scales): one
vector load gives one lane per row of W, so the integer multiply-adds need no horizontal
sums, and each block's unpacking serves every row of x in the call. Memory: about what
the file stores (Q4_K: 2.8% more, its 6-bit scales as bytes).

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
from specsample.kernels.blocks import BLOCK_BYTES, BLOCK_WEIGHTS, FORMATS

GROUP_ROWS = 16  # rows of W side by side in the packed layout
# Bytes per (group, block of 32 weights), or per (group, super-block of 256) for Q4_K, Q6_K.
PACKED_BYTES = {"q8_0": 544, "q4_0": 288, "q4_1": 320, "q5_0": 352, "q4_k": 2368, "q6_k": 3360}
ACTIVATION_PASSES = (1, 2)  # one 8-bit pass, or a second over the first's rounding error
OFFSETS = {"q8_0": 128, "q4_0": 8, "q4_1": 0, "q5_0": 16, "q4_k": 0, "q6_k": 32}
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


# ---------------------------------------------------------------------------------------
# Packing (NumPy, at load time).


def _halves_bytes(raw: np.ndarray, offset: int) -> np.ndarray:
  """The float16 at byte `offset` of each block, as raw bytes.  [..., bytes] -> [..., 2]."""
  return raw[..., offset : offset + 2]


def _chunks(values: np.ndarray) -> np.ndarray:
  """[16 rows, ..., V * 4] bytes per row -> [..., V, 16 rows, 4]: 64-byte chunks, vector v
  holding bytes 4v..4v+3 of each row."""
  rows = values.shape[0]
  v = values.reshape(rows, *values.shape[1:-1], -1, 4)  # [16, ..., V, 4]
  return np.moveaxis(v, 0, -2)


def _nibble_bytes(q: np.ndarray) -> np.ndarray:
  """4-bit values [..., 32] -> [..., 16] bytes: low nibble weight i, high weight 16 + i."""
  return (q[..., :16] | (q[..., 16:] << 4)).astype(np.uint8)


def _q4_k_fields(raw: np.ndarray):
  """Q4_K super-blocks [..., 144] -> (q [..., 256] 0..15, sc [..., 8], m [..., 8])."""
  packed = raw[..., 4:16].astype(np.int32)
  low, mid, high = packed[..., 0:4], packed[..., 4:8], packed[..., 8:12]
  sc = np.concatenate([low & 63, (high & 0xF) | ((low >> 2) & 0x30)], axis=-1)
  m = np.concatenate([mid & 63, (high >> 4) | ((mid >> 2) & 0x30)], axis=-1)
  qs = raw[..., 16:].reshape(*raw.shape[:-1], 4, 1, 32)  # 4 chunks of 32 bytes
  q = np.concatenate([qs & 0xF, qs >> 4], axis=-2).reshape(*raw.shape[:-1], 256)
  return q.astype(np.uint8), sc.astype(np.uint8), m.astype(np.uint8)


def _q6_k_values(raw: np.ndarray) -> np.ndarray:
  """Q6_K super-blocks [..., 210] -> 6-bit values [..., 256] 0..63 (value - 32 is q)."""
  lead = raw.shape[:-1]
  ql = raw[..., 0:128].reshape(*lead, 2, 64)
  qh = raw[..., 128:192].reshape(*lead, 2, 32)
  low = np.concatenate([ql & 0xF, ql >> 4], axis=-1)  # [..., 2, 128]
  high = np.concatenate([(qh >> s) & 3 for s in (0, 2, 4, 6)], axis=-1)
  return (low | (high << 4)).reshape(*lead, 256).astype(np.uint8)


def pack(blocks: np.ndarray, format: str) -> np.ndarray:
  """A GGUF matrix's bytes uint8 [out, in / weights per block * block bytes] -> the packed
  layout uint8 [ceil(out / 16), in / weights per block * PACKED_BYTES[format]]."""
  raw = np.ascontiguousarray(blocks)
  if raw.dtype != np.uint8 or raw.ndim != 2 or raw.shape[1] % BLOCK_BYTES[format]:
    raise ValueError(f"{format} blocks: expected uint8 [out, blocks * {BLOCK_BYTES[format]}]")
  out = raw.shape[0]
  groups = -(-out // GROUP_ROWS)
  padded = np.zeros((groups * GROUP_ROWS, raw.shape[1]), np.uint8)
  padded[:out] = raw
  nblocks = raw.shape[1] // BLOCK_BYTES[format]
  # [groups, 16 rows, blocks, bytes] -> per group: [16 rows, blocks, bytes]
  b = padded.reshape(groups, GROUP_ROWS, nblocks, BLOCK_BYTES[format])
  b = np.moveaxis(b, 0, 1)  # [16, groups, blocks, bytes]: rows first for _chunks
  parts = _PACKERS[format](b)  # list of [groups, blocks, ...] byte arrays
  flat = [np.ascontiguousarray(p).reshape(groups, nblocks, -1) for p in parts]
  packed = np.concatenate(flat, axis=-1)
  assert packed.shape[-1] == PACKED_BYTES[format], (packed.shape, format)
  return packed.reshape(groups, nblocks * PACKED_BYTES[format])


def _rows_last(a: np.ndarray) -> np.ndarray:
  """[16 rows, groups, blocks, ...] -> [groups, blocks, ..., 16 rows]."""
  return np.moveaxis(a, 0, -1)


def _pack_q8_0(b):
  u = (b[..., 2:].view(np.int8).astype(np.int16) + 128).astype(np.uint8)  # [16, g, nb, 32]
  return [_chunks(u), _rows_last(_halves_bytes(b, 0)).swapaxes(-1, -2)]


def _pack_4bit(b, format):
  start = {"q4_0": 2, "q4_1": 4, "q5_0": 6}[format]
  parts = [_chunks(b[..., start : start + 16])]
  if format == "q5_0":
    qh = b[..., 2:6].astype(np.uint64)  # [16, g, nb, 4]
    bits = qh[..., 0] | qh[..., 1] << 8 | qh[..., 2] << 16 | qh[..., 3] << 24  # [16, g, nb]
    masks = np.zeros(bits.shape[1:] + (8,), np.uint64)  # [g, nb, 8 vectors]
    for v in range(8):
      for t in range(GROUP_ROWS):
        for i in range(4):
          bit = (bits[t] >> np.uint64(4 * v + i)) & np.uint64(1)
          masks[..., v] |= bit << np.uint64(4 * t + i)
    parts.append(masks.astype("<u8").view(np.uint8))
  parts.append(_rows_last(_halves_bytes(b, 0)).swapaxes(-1, -2))  # d: [g, nb, 16, 2]
  if format == "q4_1":
    parts.append(_rows_last(_halves_bytes(b, 2)).swapaxes(-1, -2))  # m
  return parts


def _pack_q4_k(b):
  q, sc, m = _q4_k_fields(b)  # [16, g, nsb, 256], [16, g, nsb, 8] x2
  q = q.reshape(*q.shape[:-1], 8, 32)  # sub-blocks
  nibbles = _chunks(_nibble_bytes(q))  # [g, nsb, 8, 4, 16, 4]
  d = _rows_last(_halves_bytes(b, 0)).swapaxes(-1, -2)
  dmin = _rows_last(_halves_bytes(b, 2)).swapaxes(-1, -2)
  return [nibbles, d, dmin, _rows_last(sc), _rows_last(m)]


def _pack_q6_k(b):
  q = _q6_k_values(b).reshape(*b.shape[:-1], 8, 32)  # [16, g, nsb, 8 sub-blocks, 32]
  nibbles = _chunks(_nibble_bytes(q & 0xF))  # [g, nsb, 8, 4, 16, 4]
  pairs = (q >> 4).reshape(*q.shape[:-1], 2, 4, 4)  # [16, ..., chunk p, s, i]: vector 4p+s
  shifted = pairs.astype(np.uint8) << (2 * np.arange(4, dtype=np.uint8))[:, None]
  high = np.bitwise_or.reduce(shifted, axis=-2)  # [16, g, nsb, 8, 2, 4]
  high = np.moveaxis(high, 0, -2)  # [g, nsb, 8, 2, 16, 4]
  sub = np.concatenate(
    [nibbles.reshape(*nibbles.shape[:3], 256), high.reshape(*high.shape[:3], 128)], axis=-1
  )
  d = _rows_last(_halves_bytes(b, 208)).swapaxes(-1, -2)  # [g, nsb, 16, 2]
  sc = _rows_last(b[..., 192:208])  # [g, nsb, 16 groups, 16 rows]
  return [sub, d, sc]


_PACKERS = {
  "q8_0": _pack_q8_0,
  "q4_0": lambda b: _pack_4bit(b, "q4_0"),
  "q4_1": lambda b: _pack_4bit(b, "q4_1"),
  "q5_0": lambda b: _pack_4bit(b, "q5_0"),
  "q4_k": _pack_q4_k,
  "q6_k": _pack_q6_k,
}


def _rows_first_bytes(a: np.ndarray) -> np.ndarray:
  """[groups, blocks, ..., 16 rows, n] -> [groups, 16 rows, blocks, ..., n]."""
  return np.moveaxis(a, -2, 1)


def to_gguf_blocks(packed: np.ndarray, format: str, rows: int) -> np.ndarray:
  """The inverse of `pack`: packed uint8 [groups, group bytes] -> the GGUF matrix's bytes
  uint8 [rows, row bytes] (the file's bytes, bit for bit)."""
  packed = np.asarray(packed)
  groups, group_bytes = packed.shape
  size, g = PACKED_BYTES[format], GROUP_ROWS
  n = group_bytes // size
  b = packed.reshape(groups, n, size)

  def lanes(chunks):  # [groups, n, V, 16, 4] -> [groups, 16, n, V * 4]: each row's bytes
    moved = np.moveaxis(chunks, -2, -3)  # [groups, n, 16, V, 4]
    return _rows_first_bytes(moved.reshape(*moved.shape[:-2], -1))

  def halves(offset):  # the float16 bytes of each row: [groups, 16, n, 2]
    return _rows_first_bytes(b[..., offset : offset + 2 * g].reshape(groups, n, g, 2))

  if format == "q8_0":
    q = (lanes(b[..., :512].reshape(groups, n, 8, g, 4)).astype(np.int16) - 128).astype(np.int8)
    out = np.concatenate([halves(512), q.view(np.uint8)], axis=-1)
  elif format in ("q4_0", "q4_1"):
    qs = lanes(b[..., :256].reshape(groups, n, 4, g, 4))
    fields = [halves(256)] + ([halves(288)] if format == "q4_1" else [])
    out = np.concatenate([*fields, qs], axis=-1)
  elif format == "q5_0":
    qs = lanes(b[..., :256].reshape(groups, n, 4, g, 4))
    masks = b[..., 256:320].copy().view("<u8")  # [groups, n, 8 vectors]
    qh = np.zeros((groups, g, n), np.uint64)
    for v in range(8):
      for t in range(g):
        for i in range(4):
          bit = (masks[..., v] >> np.uint64(4 * t + i)) & np.uint64(1)
          qh[:, t] |= bit << np.uint64(4 * v + i)
    qh_bytes = qh.astype("<u4").view(np.uint8).reshape(groups, g, n, 4)
    out = np.concatenate([halves(320), qh_bytes, qs], axis=-1)
  elif format == "q4_k":
    nibbles = b[..., :2048].reshape(groups, n, 8, 4, g, 4)  # [.., sub-block, chunk, row, i]
    bytes16 = np.moveaxis(np.moveaxis(nibbles, -2, -3).reshape(groups, n, 8, g, 16), -2, 1)
    q = np.concatenate([bytes16 & 0xF, bytes16 >> 4], axis=-1)  # [groups, 16, n, 8, 32]
    qs = q[..., 0::2, :] | (q[..., 1::2, :] << 4)  # [.., 4 chunks, 32]: even j low, odd high
    sc = _rows_first_bytes(b[..., 2112:2240].reshape(groups, n, 8, g).swapaxes(-1, -2))
    m = _rows_first_bytes(b[..., 2240:2368].reshape(groups, n, 8, g).swapaxes(-1, -2))
    sc, m = sc.astype(np.int32), m.astype(np.int32)  # [groups, 16, n, 8]
    scales = np.concatenate(
      [
        (sc[..., :4] & 63) | ((sc[..., 4:] >> 4) << 6),
        (m[..., :4] & 63) | ((m[..., 4:] >> 4) << 6),
        (sc[..., 4:] & 0xF) | ((m[..., 4:] & 0xF) << 4),
      ],
      axis=-1,
    ).astype(np.uint8)
    out = np.concatenate(
      [halves(2048), halves(2080), scales, qs.reshape(groups, g, n, 128).astype(np.uint8)], -1
    )
  else:  # q6_k
    u = unpack(packed, format, np)
    values = u.values.reshape(groups, g, n, 256).astype(np.int32)  # 6-bit, weight order
    half = values.reshape(groups, g, n, 2, 128)
    ql = (half[..., :64] & 0xF) | ((half[..., 64:] & 0xF) << 4)  # [.., 2, 64]
    pairs = (half >> 4).reshape(groups, g, n, 2, 4, 32)  # weight 32t + l of each half
    qh = sum(pairs[..., t, :] << (2 * t) for t in range(4))  # [.., 2, 32]
    sc = _rows_first_bytes(b[..., 3104:3360].reshape(groups, n, 16, g).swapaxes(-1, -2))
    out = np.concatenate(
      [
        ql.reshape(groups, g, n, 128).astype(np.uint8),
        qh.reshape(groups, g, n, 64).astype(np.uint8),
        sc,
        halves(3072),
      ],
      axis=-1,
    )
  return np.ascontiguousarray(out.reshape(groups * g, -1)[:rows])


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


# ---------------------------------------------------------------------------------------
# Unpacking (NumPy or jax.numpy): the stored values and scales of each row and block.


@dataclasses.dataclass(frozen=True)
class Unpacked:
  """The numbers the arithmetic uses, per row of W and block of 32 weights.

  values: uint8 [..., 16, blocks, 32] stored unsigned values (weight = S * (u - offset)
  [* int_scales] + M); scale: float32 [..., 16, blocks] S; minimum: float32 [..., 16,
  blocks] M or None; int_scales: int32 [..., 16, blocks, 2] (Q6_K: the scales of the
  block's two groups of 16) or None."""

  values: object
  scale: object
  minimum: object
  int_scales: object
  offset: int


def _np_halves(xp, raw):
  """Raw float16 bytes [..., 2n] (little-endian) -> float32 [..., n]."""
  raw = raw.astype(xp.uint16)
  bits = raw[..., 0::2] | (raw[..., 1::2] << 8)
  if xp is np:
    return bits.astype(np.uint16).view(np.float16).astype(np.float32)
  return jax.lax.bitcast_convert_type(bits, jnp.float16).astype(jnp.float32)


def _from_chunks(xp, chunks):
  """[..., V, 16, 4] chunk bytes -> [..., 16, V * 4]: each row's bytes in order."""
  moved = xp.moveaxis(chunks, -2, -3)  # [..., 16, V, 4]
  return moved.reshape(*moved.shape[:-2], -1)


def _nibbles(xp, chunks):
  """4 chunks of nibbles [..., 4, 16, 4] -> values [..., 16, 32] 0..15."""
  bytes_ = _from_chunks(xp, chunks)  # [..., 16, 16]: byte i: low weight i, high 16 + i
  return xp.concatenate([bytes_ & 0xF, bytes_ >> 4], axis=-1)


def unpack(packed, format: str, xp=np) -> Unpacked:
  """Packed groups uint8 [..., group bytes] -> `Unpacked` (rows of each group: axis -3 of
  values). xp: numpy or jax.numpy."""
  size = PACKED_BYTES[format]
  *lead, row_bytes = packed.shape
  b = packed.reshape(*lead, row_bytes // size, size)  # [..., blocks or super-blocks, size]
  g = GROUP_ROWS
  int_scales = minimum = None

  def rows_first(a):  # [..., blocks, 16, ...] -> [..., 16, blocks, ...]
    return xp.moveaxis(a, len(lead) + 1, len(lead))

  if format == "q8_0":
    values = _from_chunks(xp, b[..., :512].reshape(*b.shape[:-1], 8, g, 4))  # [..., nb, 16, 32]
    scale = _np_halves(xp, b[..., 512:544])  # [..., nb, 16]
  elif format in ("q4_0", "q4_1", "q5_0"):
    values = _nibbles(xp, b[..., :256].reshape(*b.shape[:-1], 4, g, 4))
    if format == "q5_0":
      masks = b[..., 256:320].reshape(*b.shape[:-1], 8, 8)  # [..., nb, vector v, byte]
      # bit 4t + i of mask v: byte t // 2, bit 4 (t % 2) + i
      t = np.arange(g)
      byte = masks[..., t // 2]  # [..., nb, 8, 16]
      shifts = (4 * (t % 2))[:, None] + np.arange(4)[None, :]  # [16, 4]
      bits = (byte[..., None].astype(xp.int32) >> xp.asarray(shifts)) & 1  # [..., nb, 8, 16, 4]
      fifth = xp.moveaxis(bits, -3, -2).reshape(*bits.shape[:-3], g, 32)  # weight 4v + i
      values = values + (fifth << 4).astype(values.dtype)
      scale = _np_halves(xp, b[..., 320:352])
    else:
      scale = _np_halves(xp, b[..., 256:288])
      if format == "q4_1":
        minimum = rows_first(_np_halves(xp, b[..., 288:320]))
  elif format == "q4_k":
    nsb = b.shape[-2]
    nibbles = b[..., :2048].reshape(*b.shape[:-1], 8, 4, g, 4)
    values = _nibbles(xp, nibbles).reshape(*lead, nsb * 8, g, 32)  # [..., nb, 16, 32]
    d = _np_halves(xp, b[..., 2048:2080])[..., None, :]  # [..., nsb, 1, 16]
    dmin = _np_halves(xp, b[..., 2080:2112])[..., None, :]
    sc = b[..., 2112:2240].reshape(*b.shape[:-1], 8, g).astype(xp.float32)
    m = b[..., 2240:2368].reshape(*b.shape[:-1], 8, g).astype(xp.float32)
    scale = (d * sc).reshape(*lead, nsb * 8, g)
    minimum = rows_first(-(dmin * m).reshape(*lead, nsb * 8, g))
  else:  # q6_k
    nsb = b.shape[-2]
    sub = b[..., :3072].reshape(*b.shape[:-1], 8, 384)
    low = _nibbles(xp, sub[..., :256].reshape(*sub.shape[:-1], 4, g, 4))  # [..., 8, 16, 32]
    pairs = sub[..., 256:384].reshape(*sub.shape[:-1], 2, g, 4)  # [..., 8, p, 16, i]
    shifts = xp.asarray(2 * np.arange(4), dtype=xp.uint8)  # vector 4p + s: bits 2s, 2s + 1
    high = (pairs[..., None, :, :] >> shifts[:, None, None]) & 3  # [..., 8, p, s, 16, i]
    high = xp.moveaxis(high.reshape(*high.shape[:-4], 8, g, 4), -2, -3)  # [..., 8, 16, v, i]
    values = low | (high.reshape(*high.shape[:-2], 32) << 4)  # [..., nsb, 8, 16, 32]
    values = values.reshape(*lead, nsb * 8, g, 32)
    d = _np_halves(xp, b[..., 3072:3104])  # [..., nsb, 16]
    scale = xp.repeat(d, 8, axis=-2)  # [..., nb, 16]
    sc = b[..., 3104:3360].reshape(*b.shape[:-1], 8, 2, g)
    if xp is np:
      sc = sc.view(np.int8).astype(np.int32)
    else:
      sc = jax.lax.bitcast_convert_type(sc, jnp.int8).astype(jnp.int32)
    int_scales = xp.moveaxis(sc.reshape(*lead, nsb * 8, 2, g), -1, -2)  # [..., nb, 16, 2]
    int_scales = rows_first(int_scales)
  return Unpacked(
    values=rows_first(values),
    scale=rows_first(scale),
    minimum=minimum,
    int_scales=int_scales,
    offset=OFFSETS[format],
  )


def dequantize_unpacked(u: Unpacked, xp=np):
  """The weights float32 [..., 16, in] (the gguf package's dequantization, bit for bit)."""
  q = u.values.astype(xp.int32) - u.offset  # [..., 16, nb, 32]
  scale = u.scale[..., None]
  if u.int_scales is not None:  # Q6_K: (d * sc) * q, d * sc exact
    sc = xp.repeat(u.int_scales, 16, axis=-1).astype(xp.float32)  # [..., 16, nb, 32]
    w = (scale * sc) * q.astype(xp.float32)
  else:
    w = scale * q.astype(xp.float32)
  if u.minimum is not None:
    w = w + u.minimum[..., None]
  return w.reshape(*w.shape[:-2], -1)


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
