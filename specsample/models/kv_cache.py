"""The one key/value cache of every attention model here (T5's decoder self-attention,
DecoderOnly, FeatureDraft): its layout, its writes and its bookkeeping.

  KeysValues  one attention layer's keys and values, each [batch, capacity, heads,
              head_dim] (a NamedTuple, so `(keys, values)` unpacking and `[0]`/`[1]` work)
  KVCache     every layer's KeysValues and each row's `end_index` int32[batch], the
              number of valid entries; the models' states are KVCaches (with their own
              extra fields), so `rewind` and `keep_path` are the same for all of them.

The rules (design.md, "The model contract"):
  - a call writes its k new keys/values at each row's write index (`KeysValues.write`: ONE
    vmapped `dynamic_update_slice` per array; a per-row loop made the programs of large T5
    batches blow up at compile time) and attends over the whole capacity with a mask
    (`causal_mask`, `tree_mask`); the end index then advances by each row's number of
    valid tokens (`KVCache.advance`);
  - entries at or past a row's end index are stale: masked, and overwritten by later writes;
  - `rewind` only moves the end index (O(1), never a copy of the cache);
  - `keep_path` moves a token tree's accepted path to the committed end (O(path) per layer).

The network code (a layer's forward pass) sees only the per-layer `KeysValues` and the
write index; the model code owns the `KVCache` and moves its end index.
"""

from __future__ import annotations

from typing import NamedTuple, Self

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from specsample.kernels.attention import BFLOAT16_BITS

# The logical axes of a cache array, for a partitioning's `constrain` (scaling.rules).
CACHE_AXES = ("batch", "length", "heads", "head_dim")  # T5: heads = the query heads
KV_CACHE_AXES = ("batch", "length", "kv_heads", "head_dim")  # grouped-query attention


# A compact bfloat16 cache (DecoderOnly's `cache_dtype`) is kept as the numbers' bit
# patterns: XLA's CPU compiler computes bfloat16 updates in float32, converting the whole
# cache there and back (a copy of every layer's cache per step), while an update of integers
# stays in place. Attention (kernels.attention) reads such a cache as bfloat16 numbers.


def storage_dtype(dtype) -> jnp.dtype:
  """The dtype a cache of `dtype` numbers is kept in (bfloat16 -> its bits)."""
  return jnp.dtype(BFLOAT16_BITS if jnp.dtype(dtype) == jnp.bfloat16 else dtype)


def write_at(cache: jax.Array, new: jax.Array, index: jax.Array) -> jax.Array:
  """Writes new [batch, k, ...] into cache [batch, capacity, ...] at each row's index
  int32[batch]: one vmapped dynamic_update_slice (XLA writes it in place)."""

  def write_row(row_cache, row_new, row_index):
    start = (row_index,) + (jnp.zeros((), row_index.dtype),) * (row_cache.ndim - 1)
    return jax.lax.dynamic_update_slice(row_cache, row_new, start)

  if cache.dtype == BFLOAT16_BITS and new.dtype != BFLOAT16_BITS:  # numbers -> their bits
    new = jax.lax.bitcast_convert_type(new.astype(jnp.bfloat16), BFLOAT16_BITS)
  return jax.vmap(write_row)(cache, new.astype(cache.dtype), index)


def move_to_end(cache: jax.Array, slots: jax.Array, end_index: jax.Array) -> jax.Array:
  """Copies cache[b, end + slots[b, j]] to cache[b, end + j] for every j (a tree's kept
  path moved to the committed end).  cache [batch, capacity, ...], slots int32[batch, L]."""
  sources = end_index[:, None] + slots  # [batch, L]
  index = sources.reshape(sources.shape + (1,) * (cache.ndim - 2))
  return write_at(cache, jnp.take_along_axis(cache, index, axis=1), end_index)


class KeysValues(NamedTuple):
  """One attention layer's keys and values, each [batch, positions, heads, head_dim]: a
  self-attention cache (positions = its capacity), or precomputed cross-attention
  keys/values (positions = the encoder's length)."""

  keys: jax.Array
  values: jax.Array

  @classmethod
  def zeros(cls, batch: int, capacity: int, heads: int, head_dim: int, dtype) -> KeysValues:
    shape = (batch, capacity, heads, head_dim)
    return cls(jnp.zeros(shape, dtype), jnp.zeros(shape, dtype))

  @property
  def capacity(self) -> int:
    return self.keys.shape[1]

  def write(self, keys: jax.Array, values: jax.Array, index: jax.Array) -> KeysValues:
    """This layer with keys, values [batch, k, heads, head_dim] written at each row's index
    int32[batch] (entries index .. index + k - 1)."""
    return KeysValues(write_at(self.keys, keys, index), write_at(self.values, values, index))

  def move_to_end(self, slots: jax.Array, end_index: jax.Array) -> KeysValues:
    """This layer with entries end + slots[b, j] copied to end + j (`move_to_end`)."""
    return KeysValues(
      move_to_end(self.keys, slots, end_index), move_to_end(self.values, slots, end_index)
    )

  def constrain(self, partitioning, logical_axes: tuple[str, ...]) -> KeysValues:
    """Both arrays placed by `partitioning.constrain` (None: unchanged)."""
    if partitioning is None:
      return self
    return KeysValues(
      partitioning.constrain(self.keys, logical_axes),
      partitioning.constrain(self.values, logical_axes),
    )


def zeros(
  num_layers: int, batch: int, capacity: int, heads: int, head_dim: int, dtype
) -> tuple[KeysValues, ...]:
  """Zeroed caches of `num_layers` layers, each keys and values [batch, capacity, heads,
  head_dim]."""
  return tuple(KeysValues.zeros(batch, capacity, heads, head_dim, dtype) for _ in range(num_layers))


@struct.dataclass
class KVCache:
  """Every attention layer's cache and each row's end index: the state of a decoder-only
  model, and the base of every attention model's state (which adds its own fields)."""

  caches: tuple[KeysValues, ...]  # per layer: keys, values [batch, capacity, heads, head_dim]
  end_index: jax.Array  # int32[batch]: entries 0 .. end_index - 1 of each row are valid

  @property
  def capacity(self) -> int:
    return self.caches[0].capacity

  @property
  def valid(self) -> jax.Array:
    """bool[batch, capacity]: the committed entries of each row."""
    return jnp.arange(self.capacity, dtype=jnp.int32)[None, :] < self.end_index[:, None]

  def advance(self, num_valid: jax.Array) -> Self:
    """Each row's end index moved on by num_valid int32[batch] (after a call's write)."""
    return self.replace(end_index=self.end_index + num_valid.astype(jnp.int32))

  def rewind(self, end_index: jax.Array) -> Self:
    """Each row's end index set to end_index int32[batch]; O(1), nothing is copied."""
    return self.replace(end_index=end_index.astype(jnp.int32))

  def keep_path(self, slots: jax.Array, num_kept: jax.Array) -> Self:
    """Tree slots int32[batch, L] (written at end_index + slot) moved to end_index + 0..L-1
    in every layer, and the first num_kept int32[batch] of them committed."""
    caches = tuple(layer.move_to_end(slots, self.end_index) for layer in self.caches)
    return self.replace(caches=caches).advance(num_kept)

  def constrain(self, partitioning, logical_axes: tuple[str, ...]) -> Self:
    """Every layer placed by `partitioning.constrain` (None: unchanged)."""
    if partitioning is None:
      return self
    return self.replace(caches=tuple(c.constrain(partitioning, logical_axes) for c in self.caches))


def causal_mask(positions: jax.Array, capacity: int, window: int | None = None) -> jax.Array:
  """Which cache entries each query sees, for entry i at position i.
  int32[batch, k] -> bool[batch, k, capacity].

  Causal (entry position <= query position; stale entries beyond a row's end are always
  later than its queries), and within the last `window` positions if given.
  """
  keys = jnp.arange(capacity, dtype=jnp.int32)[None, None, :]
  allowed = keys <= positions[:, :, None]
  if window is not None:
    allowed &= keys > positions[:, :, None] - window
  return allowed


def tree_mask(layout, start: int, k: int, end_index: jax.Array, capacity: int):
  """Positions and visibility of k tree slots start..start+k-1 of `layout` (a
  core.tree.TreeLayout, the same for every row, or a core.dynamic_tree.RowTrees, each
  row's own), written at end_index + slot, after a committed prefix ending at end_index
  int32[batch].

  Returns query positions int32[batch, k] (end + depth), the position of every cache entry
  int32[batch, capacity] (tree entries: end + their depth; others: their index) and
  allowed bool[batch, k, capacity]: the committed prefix, and the tree slots that are the
  query itself or its ancestors.
  """
  size = start + k  # tree slots written so far, this call's included
  keys = jnp.arange(capacity, dtype=jnp.int32)[None, :]  # [1, capacity]
  offset = keys - end_index[:, None]  # [batch, capacity]
  in_tree = (offset >= 0) & (offset < size)
  slot = jnp.clip(offset, 0, size - 1)
  if isinstance(layout.depths, np.ndarray):  # one static layout for every row
    depths = jnp.asarray(layout.depths[:size], jnp.int32)
    ancestors = jnp.asarray(layout.ancestors[start:size, :size])  # [k, size]
    key_positions = jnp.where(in_tree, end_index[:, None] + depths[slot], keys)
    query_positions = end_index[:, None] + depths[start:size][None, :]
    sees_slot = jnp.moveaxis(jnp.take(ancestors, slot, axis=1), 0, 1)  # [batch, k, capacity]
  else:  # each row's own layout (core.dynamic_tree.RowTrees)
    depths = layout.depths[:, :size]  # [batch, size]
    ancestors = layout.ancestors[:, start:size, :size]  # [batch, k, size]
    key_positions = jnp.where(
      in_tree, end_index[:, None] + jnp.take_along_axis(depths, slot, 1), keys
    )
    query_positions = end_index[:, None] + depths[:, start:size]
    sees_slot = jnp.take_along_axis(
      ancestors, jnp.broadcast_to(slot[:, None], (slot.shape[0], k, capacity)), 2
    )
  allowed = (offset < 0)[:, None, :] | (in_tree[:, None, :] & sees_slot)
  return query_positions, key_positions, allowed
