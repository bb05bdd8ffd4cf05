"""The packed layout of a GGUF matrix for the 8-bit kernel (`int8_blocks`), and the way
back: `pack` (NumPy, at load time), `to_gguf_blocks` (its inverse, the file's bytes bit
for bit) and `unpack` (NumPy or jax.numpy: the stored values and scales per row and block
of 32 weights, what the reference arithmetic and row lookups read).

The packed layout puts 16 rows of W side by side (a group): per block of 32 weights,
64-byte chunks hold 4 consecutive stored values of each of the 16 rows (vector v: weights
4v..4v+3, as nibbles for the 4-bit formats: low nibble vector c, high nibble vector 4 + c),
then the scales (float16 d, Q4_1's m; Q5_0's fifth bits as 64-bit masks; Q4_K's d, dmin
and 6-bit scales and minimums as bytes; Q6_K's high bit pairs and int8 scales): one
vector load gives one lane per row of W, so the integer multiply-adds need no horizontal
sums, and each block's unpacking serves every row of x in the call. Memory: about what
the file stores (Q4_K: 2.8% more, its 6-bit scales as bytes).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from specsample.kernels.blocks import BLOCK_BYTES

GROUP_ROWS = 16  # rows of W side by side in the packed layout
# Bytes per (group, block of 32 weights), or per (group, super-block of 256) for Q4_K, Q6_K.
PACKED_BYTES = {"q8_0": 544, "q4_0": 288, "q4_1": 320, "q5_0": 352, "q4_k": 2368, "q6_k": 3360}
OFFSETS = {"q8_0": 128, "q4_0": 8, "q4_1": 0, "q5_0": 16, "q4_k": 0, "q6_k": 32}


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
