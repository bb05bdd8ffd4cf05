"""`T5`: a T5 checkpoint behind the model contract, ready for `speculative_generate`.

The object carries its parameters (a pytree, traced under `jit`) and its `T5Config`
(static). `init_state` runs the encoder once and precomputes every decoder layer's
cross-attention keys/values; `extend` runs the decoder over k tokens per row at each
row's own end index; `rewind` only moves the end index. The decoder's self-attention cache
is a `models.kv_cache.KVCache` (the state is one, with the cross-attention inputs added).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from specsample.core.tree import TreeLayout
from specsample.models import kv_cache
from specsample.models.kv_cache import CACHE_AXES, KeysValues, KVCache, tree_mask
from specsample.models.t5.config import T5Config
from specsample.models.t5.network import T5Network
from specsample.models.weights import read_weights


@struct.dataclass
class T5State(KVCache):
  """The decoder's self-attention cache (`caches`: per decoder layer, keys and values
  [batch, capacity, heads, head_dim]; `end_index` int32[batch]: decoder positions written
  and valid) and what the encoder gave."""

  cross: tuple[KeysValues, ...]  # per decoder layer: [batch, enc_length, heads, head_dim] x2
  encoder_valid: jax.Array  # bool[batch, enc_length]


@struct.dataclass
class T5:
  """A T5 encoder-decoder with its parameters (T5X names and layouts)."""

  params: Any
  config: T5Config = struct.field(pytree_node=False)
  # Optional, static: an object with `constrain(array, logical_axes)` (for example
  # specsample.scaling.Partitioning) that places the decoding state on a device mesh.
  partitioning: Any = struct.field(pytree_node=False, default=None)

  @classmethod
  def init_random(cls, config: T5Config, seed: int = 0) -> T5:
    """Random parameters (for tests and benchmarks)."""
    tokens = jnp.ones((1, 2), jnp.int32)
    params = T5Network(config).init(jax.random.key(seed), tokens, tokens)["params"]
    return cls(params=params, config=config)

  @property
  def vocab_size(self) -> int:
    return self.config.vocab_size

  @property
  def eos_id(self) -> int:
    return self.config.eos_id

  @property
  def pad_id(self) -> int:
    return self.config.pad_id

  @property
  def prompt_pad_id(self) -> int:
    """Padding is never an encoder input (T5X masks `tokens > 0`): trailing pad ids of a
    [batch, length] prompt array are padding."""
    return self.config.pad_id

  def _constrain(self, x: jax.Array, logical_axes: tuple[str, ...]) -> jax.Array:
    if self.partitioning is None:
      return x
    return self.partitioning.constrain(x, logical_axes)

  def _constrain_caches(self, caches: tuple[KeysValues, ...]) -> tuple[KeysValues, ...]:
    """Keys/values [batch, positions, heads, head_dim]: batch over data, heads over model."""
    return tuple(layer.constrain(self.partitioning, CACHE_AXES) for layer in caches)

  def _apply(self, *args, method):
    return T5Network(self.config).apply({"params": self.params}, *args, method=method)

  # ----- the model contract ------------------------------------------------------------

  def init_state(
    self, prompts: jax.Array, prompt_lengths: jax.Array, num_new_positions: int
  ) -> tuple[T5State, jax.Array]:
    batch, length = prompts.shape
    prompts = self._constrain(prompts, ("batch", "length"))
    valid = jnp.arange(length)[None, :] < prompt_lengths[:, None]  # [batch, length]
    encoded = self._apply(prompts, valid, method=T5Network.encode)
    cross = self._apply(encoded, method=T5Network.cross_keys_values)
    c = self.config
    caches = kv_cache.zeros(
      c.num_decoder_layers, batch, num_new_positions, c.num_heads, c.head_dim, jnp.dtype(c.dtype)
    )
    caches, cross = self._constrain_caches(caches), self._constrain_caches(cross)
    state = T5State(
      cross=cross,
      encoder_valid=valid,
      caches=caches,
      end_index=jnp.zeros((batch,), jnp.int32),
    )
    return state, jnp.full((batch,), c.decoder_start_id, jnp.int32)

  def extend(
    self, state: T5State, tokens: jax.Array, num_valid: jax.Array
  ) -> tuple[jax.Array, T5State]:
    positions = state.end_index[:, None] + jnp.arange(tokens.shape[1], dtype=jnp.int32)
    logits, state = self._decode(state, tokens, positions, state.end_index)
    return logits, state.advance(num_valid)

  def _decode(self, state: T5State, tokens, positions, write_index, *tree_masks):
    """The decoder over tokens int32[batch, k] at positions [batch, k], written from
    write_index [batch] (tree_masks: key_positions and allowed of a tree call) -> (logits
    [batch, k, vocab], the state with the caches written; its end index unmoved)."""
    logits, caches = self._apply(
      tokens, positions, state.cross, state.encoder_valid, state.caches, write_index,
      *tree_masks, method=T5Network.decode,
    )  # fmt: skip
    return logits, state.replace(caches=self._constrain_caches(caches))

  def weights_per_call(self) -> tuple[int, int]:
    """(count, bytes) of the weights a decoder `extend` call reads: the decoder's, less the
    cross-attention keys/values (computed once from the encoder's output), and the token
    embedding when it is the tied output layer."""

    def skip(path: tuple[str, ...]) -> bool:
      if path[0] == "encoder" or "relpos_bias" in path:  # relative-position tables: gathered
        return True
      if path[0] == "token_embedder":
        return not self.config.tie_word_embeddings
      return "encoder_decoder_attention" in path and path[-2] in ("key", "value")

    return read_weights(self.params, skip)

  def rewind(self, state: T5State, end_index: jax.Array) -> T5State:
    return state.rewind(end_index)

  def extend_tree(
    self, state: T5State, tokens: jax.Array, layout: TreeLayout, start: int
  ) -> tuple[jax.Array, T5State]:
    """Scores tokens int32[batch, k] as slots start..start+k-1 of a token tree (written
    at end_index + slot, at positions end_index + depth, each seeing the committed prefix
    and its own ancestors; relative positions from the depths). The end index stays."""
    positions, key_positions, allowed = tree_mask(
      layout, start, tokens.shape[1], state.end_index, state.capacity
    )
    return self._decode(state, tokens, positions, state.end_index + start, key_positions, allowed)

  def keep_path(self, state: T5State, slots: jax.Array, num_kept: jax.Array) -> T5State:
    """Moves tree slots int32[batch, L] to end_index + 0..L-1 and commits the first
    num_kept int32[batch] of them."""
    state = state.keep_path(slots, num_kept)
    return state.replace(caches=self._constrain_caches(state.caches))

  # ----- whole-sequence passes -----------------------------------------------------------

  def forward(self, encoder_tokens: jax.Array, decoder_input_tokens: jax.Array) -> jax.Array:
    """Teacher-forced logits float32[batch, decoder_length, vocab] (T5X padding rules)."""
    return T5Network(self.config).apply(
      {"params": self.params}, encoder_tokens, decoder_input_tokens
    )

  def encode(self, encoder_tokens: jax.Array) -> jax.Array:
    """Encoder output [batch, length, d_model]; token 0 is padding."""
    return self._apply(encoder_tokens, encoder_tokens > 0, method=T5Network.encode)
