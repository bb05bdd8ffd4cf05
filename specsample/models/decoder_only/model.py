"""`DecoderOnly`: a decoder-only transformer with its parameters, behind the model contract.

`init_state` prefills every prompt token but the last (returned as the pending token);
`extend` runs k tokens per row at each row's own end index; `rewind` moves the index.
`DecoderOnly.init_random(preset("llama-134m"))` gives random weights of a realistic size;
`specsample.load_model` gives real ones (GGUF, Hugging Face directories and hub ids).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from specsample.core.tree import TreeLayout
from specsample.models.decoder_only.config import DecoderOnlyConfig
from specsample.models.decoder_only.network import (
  DecoderOnlyNetwork,
  KeysValues,
  empty_caches,
  init_params,
)
from specsample.models.layers import move_to_end, tree_attention
from specsample.models.weights import read_weights


@struct.dataclass
class DecoderOnlyState:
  caches: tuple[KeysValues, ...]  # per layer: [batch, capacity, kv_heads, head_dim] x2
  end_index: jax.Array  # int32[batch]


@struct.dataclass
class DecoderOnly:
  """A decoder-only language model with its parameters (the model contract)."""

  params: Any
  config: DecoderOnlyConfig = struct.field(pytree_node=False)
  # Optional, static: `constrain(array, logical_axes)` (specsample.scaling.Partitioning).
  partitioning: Any = struct.field(pytree_node=False, default=None)

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

  def _run(self, caches, tokens, end_index, positions=None, allowed=None, with_features=False):
    if positions is None:
      positions = end_index[:, None] + jnp.arange(tokens.shape[1], dtype=jnp.int32)
    outputs = DecoderOnlyNetwork(self.config).apply(
      {"params": self.params}, tokens, positions, caches, end_index, allowed, with_features
    )
    if with_features:
      logits, caches, features = outputs
      return logits, self._constrain(caches), features
    logits, caches = outputs
    return logits, self._constrain(caches)

  def _constrain(self, caches):
    if self.partitioning is not None:
      axes = ("batch", "length", "kv_heads", "head_dim")
      caches = tuple(
        (self.partitioning.constrain(k, axes), self.partitioning.constrain(v, axes))
        for k, v in caches
      )
    return caches

  def init_state(
    self, prompts: jax.Array, prompt_lengths: jax.Array, num_new_positions: int
  ) -> tuple[DecoderOnlyState, jax.Array]:
    """Prefills every prompt token but the last, which is returned as the pending token."""
    batch, length = prompts.shape
    caches = empty_caches(self.config, batch, length + num_new_positions)
    start = jnp.zeros((batch,), jnp.int32)
    _, caches = self._run(caches, prompts, start)  # positions past a row's end are stale
    pending = jnp.take_along_axis(prompts, (prompt_lengths - 1)[:, None], axis=1)[:, 0]
    state = DecoderOnlyState(caches=caches, end_index=(prompt_lengths - 1).astype(jnp.int32))
    return state, pending.astype(jnp.int32)

  def extend(
    self, state: DecoderOnlyState, tokens: jax.Array, num_valid: jax.Array
  ) -> tuple[jax.Array, DecoderOnlyState]:
    logits, caches = self._run(state.caches, tokens, state.end_index)
    return logits, state.replace(caches=caches, end_index=state.end_index + num_valid)

  # Features: the final-normed hidden states, the output layer's input (what a
  # feature-level draft, models.feature_draft, reads from its target).

  @property
  def feature_size(self) -> int:
    return self.config.d_model

  def init_state_with_features(
    self, prompts: jax.Array, prompt_lengths: jax.Array, num_new_positions: int
  ) -> tuple[DecoderOnlyState, jax.Array, jax.Array]:
    """`init_state`, and the features of every prompt position [batch, length, d_model]
    (position j's predicts token j + 1; past a row's length - 2 they are padding)."""
    batch, length = prompts.shape
    caches = empty_caches(self.config, batch, length + num_new_positions)
    start = jnp.zeros((batch,), jnp.int32)
    _, caches, features = self._run(caches, prompts, start, with_features=True)
    pending = jnp.take_along_axis(prompts, (prompt_lengths - 1)[:, None], axis=1)[:, 0]
    state = DecoderOnlyState(caches=caches, end_index=(prompt_lengths - 1).astype(jnp.int32))
    return state, pending.astype(jnp.int32), features

  def extend_with_features(
    self, state: DecoderOnlyState, tokens: jax.Array, num_valid: jax.Array
  ) -> tuple[jax.Array, jax.Array, DecoderOnlyState]:
    """`extend`, and the features of the k positions: (logits [batch, k, vocab], features
    [batch, k, d_model], state)."""
    logits, caches, features = self._run(state.caches, tokens, state.end_index, with_features=True)
    return logits, features, state.replace(caches=caches, end_index=state.end_index + num_valid)

  def weights_per_call(self) -> tuple[int, int]:
    """(count, bytes) of the weights an `extend` call reads: every layer's and the output
    layer's (the input embedding only when it is the tied output layer; otherwise its
    rows are gathered)."""
    tied = self.config.tie_word_embeddings
    return read_weights(self.params, skip=lambda path: path[0] == "embed" and not tied)

  def rewind(self, state: DecoderOnlyState, end_index: jax.Array) -> DecoderOnlyState:
    return state.replace(end_index=end_index.astype(jnp.int32))

  def extend_tree(
    self, state: DecoderOnlyState, tokens: jax.Array, layout: TreeLayout, start: int
  ) -> tuple[jax.Array, DecoderOnlyState]:
    """Scores tokens int32[batch, k] as slots start..start+k-1 of a token tree (written
    at end_index + slot, at positions end_index + depth, each seeing the committed prefix
    and its own ancestors). The end index stays: `keep_path` commits one path."""
    capacity = state.caches[0][0].shape[1]
    write_index = state.end_index + start
    positions, key_positions, allowed = tree_attention(
      layout, start, tokens.shape[1], state.end_index, capacity
    )
    if self.config.sliding_window is not None:
      window = self.config.sliding_window
      allowed &= key_positions[:, None, :] > positions[:, :, None] - window
    logits, caches = self._run(state.caches, tokens, write_index, positions, allowed)
    return logits, state.replace(caches=caches)

  def keep_path(
    self, state: DecoderOnlyState, slots: jax.Array, num_kept: jax.Array
  ) -> DecoderOnlyState:
    """Moves tree slots int32[batch, L] to end_index + 0..L-1 and commits the first
    num_kept int32[batch] of them."""
    caches = tuple(
      (move_to_end(k, slots, state.end_index), move_to_end(v, slots, state.end_index))
      for k, v in state.caches
    )
    return state.replace(caches=caches, end_index=state.end_index + num_kept.astype(jnp.int32))

  def forward(self, tokens: jax.Array) -> jax.Array:
    """Logits float32[batch, length, vocab] of whole sequences tokens int32[batch, length]
    (no padding), in one pass: the reference for parity tests and teacher forcing."""
    batch, length = tokens.shape
    caches = empty_caches(self.config, batch, length)
    logits, _ = self._run(caches, tokens, jnp.zeros((batch,), jnp.int32))
    return logits
