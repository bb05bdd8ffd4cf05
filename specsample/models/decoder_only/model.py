"""`DecoderOnly`: a decoder-only transformer with its parameters, behind the model contract.

`init_state` prefills every prompt token but the last (returned as the pending token);
`extend` runs k tokens per row at each row's own end index; `rewind` moves the index. The
state is the model's `models.kv_cache.KVCache` itself.
`DecoderOnly.init_random(preset("llama-134m"))` gives random weights of a realistic size;
`specsample.load_model` gives real ones (GGUF, Hugging Face directories and hub ids).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from specsample.core.tree import TreeLayout
from specsample.models import prefill
from specsample.models.decoder_only.config import DecoderOnlyConfig
from specsample.models.decoder_only.network import DecoderOnlyNetwork, empty_caches, init_params
from specsample.models.kv_cache import KV_CACHE_AXES, KVCache, tree_mask
from specsample.models.weights import read_weights

# The state: per layer keys and values [batch, capacity, kv_heads, head_dim], and each
# row's end index int32[batch].
DecoderOnlyState = KVCache


@struct.dataclass
class DecoderOnly:
  """A decoder-only language model with its parameters (the model contract)."""

  params: Any
  config: DecoderOnlyConfig = struct.field(pytree_node=False)
  # Optional, static: `constrain(array, logical_axes)` (specsample.scaling.Partitioning).
  partitioning: Any = struct.field(pytree_node=False, default=None)
  # Static: prompt arrays padded past their longest row are prefilled in passes
  # (`models.prefill.for_padded_prompts`).
  padded_prefill: bool = struct.field(pytree_node=False, default=False)

  @classmethod
  def init_random(cls, config: DecoderOnlyConfig, seed: int = 0) -> DecoderOnly:
    """Random parameters (for tests and benchmarks)."""
    return cls(params=init_params(config, jax.random.key(seed)), config=config)

  @property
  def vocab_size(self) -> int:
    return self.config.vocab_size

  @property
  def eos_id(self) -> int | None:
    return self.config.eos_id

  @property
  def pad_id(self) -> int:
    return self.config.pad_id

  def _run(self, state: KVCache, tokens, write_index=None, positions=None, allowed=None, **kw):
    """The network over tokens int32[batch, k] written at write_index int32[batch] (default:
    each row's end) -> (logits, the state with them written; its end index unmoved), and
    the features third with `with_features=True`."""
    if write_index is None:
      write_index = state.end_index
    if positions is None:
      positions = write_index[:, None] + jnp.arange(tokens.shape[1], dtype=jnp.int32)
    logits, caches, *features = DecoderOnlyNetwork(self.config).apply(
      {"params": self.params}, tokens, positions, state.caches, write_index, allowed, **kw
    )
    state = state.replace(caches=caches).constrain(self.partitioning, KV_CACHE_AXES)
    return (logits, state, *features)

  def _prefill(self, prompts, prompt_lengths, num_new_positions, with_features=False):
    """Every prompt token written, up to the longest row's length (positions past a row's
    length are stale); the end index at the last one, which is pending. With
    `padded_prefill`, a prompt array padded past its longest row goes in passes, as
    many as that row needs (`models.prefill`)."""
    batch, length = prompts.shape
    caches = empty_caches(self.config, batch, length + num_new_positions)
    state = KVCache(caches=caches, end_index=jnp.zeros((batch,), jnp.int32))

    def one_pass(state):
      _, state, *features = self._run(state, prompts, with_features=with_features)
      return state, (features[0] if with_features else None)

    def run_pass(state, start):  # positions start .. start + PREFILL_CHUNK - 1
      tokens = jax.lax.dynamic_slice_in_dim(prompts, start, prefill.PREFILL_CHUNK, axis=1)
      _, state, *features = self._run(state, tokens, with_features=with_features)
      return state, (features[0] if with_features else None)

    state, outputs = prefill.prefill(
      one_pass, run_pass, state, length, prompt_lengths, self.padded_prefill
    )
    features = [outputs] if with_features else []
    pending = jnp.take_along_axis(prompts, (prompt_lengths - 1)[:, None], axis=1)[:, 0]
    state = state.rewind(prompt_lengths - 1)
    return (state, pending.astype(jnp.int32), *features)

  def init_state(
    self, prompts: jax.Array, prompt_lengths: jax.Array, num_new_positions: int
  ) -> tuple[DecoderOnlyState, jax.Array]:
    """Prefills every prompt token but the last, which is returned as the pending token."""
    return self._prefill(prompts, prompt_lengths, num_new_positions)

  def extend(
    self, state: DecoderOnlyState, tokens: jax.Array, num_valid: jax.Array
  ) -> tuple[jax.Array, DecoderOnlyState]:
    logits, state = self._run(state, tokens)
    return logits, state.advance(num_valid)

  # Features: the final-normed hidden states, the output layer's input (what a
  # feature-level draft, models.feature_draft, reads from its target), after the outputs
  # of config.feature_layers when it names any (EAGLE-3's low and middle layers).

  @property
  def feature_size(self) -> int:
    return self.config.feature_size

  def with_feature_layers(self, layers) -> DecoderOnly:
    """This model giving the outputs of `layers` (indices) before the final-normed state
    in its features (what a draft that fuses them reads); the same weights."""
    layers = tuple(int(i) for i in layers)
    if any(not 0 <= i < self.config.num_layers for i in layers):
      raise ValueError(
        f"feature layers {layers}: this model has layers 0..{self.config.num_layers - 1}"
      )
    return self.replace(config=self.config.replace(feature_layers=layers))

  def init_state_with_features(
    self, prompts: jax.Array, prompt_lengths: jax.Array, num_new_positions: int
  ) -> tuple[DecoderOnlyState, jax.Array, jax.Array]:
    """`init_state`, and the features of every prompt position [batch, length, feature_size]
    (position j's predicts token j + 1; past a row's length - 2 they are padding)."""
    return self._prefill(prompts, prompt_lengths, num_new_positions, with_features=True)

  def extend_with_features(
    self, state: DecoderOnlyState, tokens: jax.Array, num_valid: jax.Array
  ) -> tuple[jax.Array, jax.Array, DecoderOnlyState]:
    """`extend`, and the features of the k positions: (logits [batch, k, vocab], features
    [batch, k, feature_size], state)."""
    logits, state, features = self._run(state, tokens, with_features=True)
    return logits, features, state.advance(num_valid)

  def weights_per_call(self) -> tuple[int, int]:
    """(count, bytes) of the weights an `extend` call reads: every layer's and the output
    layer's (the input embedding only when it is the tied output layer; otherwise its
    rows are gathered)."""
    tied = self.config.tie_word_embeddings
    return read_weights(self.params, skip=lambda path: path[0] == "embed" and not tied)

  def rewind(self, state: DecoderOnlyState, end_index: jax.Array) -> DecoderOnlyState:
    return state.rewind(end_index)

  def extend_tree(
    self, state: DecoderOnlyState, tokens: jax.Array, layout: TreeLayout, start: int
  ) -> tuple[jax.Array, DecoderOnlyState]:
    """Scores tokens int32[batch, k] as slots start..start+k-1 of a token tree (written
    at end_index + slot, at positions end_index + depth, each seeing the committed prefix
    and its own ancestors). The end index stays: `keep_path` commits one path."""
    positions, key_positions, allowed = tree_mask(
      layout, start, tokens.shape[1], state.end_index, state.capacity
    )
    if self.config.sliding_window is not None:
      window = self.config.sliding_window
      allowed &= key_positions[:, None, :] > positions[:, :, None] - window
    # Local layers (Gemma) window the mask by these positions themselves.
    local = {"key_positions": key_positions} if self.config.local_layers else {}
    return self._run(state, tokens, state.end_index + start, positions, allowed, **local)

  def keep_path(
    self, state: DecoderOnlyState, slots: jax.Array, num_kept: jax.Array
  ) -> DecoderOnlyState:
    """Moves tree slots int32[batch, L] to end_index + 0..L-1 and commits the first
    num_kept int32[batch] of them."""
    return state.keep_path(slots, num_kept)

  def forward(self, tokens: jax.Array) -> jax.Array:
    """Logits float32[batch, length, vocab] of whole sequences tokens int32[batch, length]
    (no padding), in one pass: the reference for parity tests and teacher forcing."""
    batch, length = tokens.shape
    caches = empty_caches(self.config, batch, length)
    state = KVCache(caches=caches, end_index=jnp.zeros((batch,), jnp.int32))
    return self._run(state, tokens)[0]
