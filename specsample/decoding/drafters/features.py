"""The drafter of feature drafts (EAGLE-style, models.feature_draft): the draft reads the
target's features of the committed text.

The target's verify call returns its features; after the verdict the draft is rewound to
before x_1 (its entries for the block were made from its own predicted features) and owes
x_1..x_n, y, each paired with the target's feature of the position before it. Step 1
catches up on them in one call only as wide as the row that owes most.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from specsample.decoding.drafters.base import Scored, rewind_target
from specsample.decoding.drafters.chain import (
  ChainDrafter,
  at_position,
  draft_call,
)


@struct.dataclass(kw_only=True)
class FeatureState:
  model_state: Any  # the draft's cache, through the target's last feature it was given
  pending: jax.Array  # int32[batch, gamma + 1]: committed tokens the draft has not seen
  num_pending: jax.Array  # int32[batch] in 1..gamma + 1
  pending_features: jax.Array  # float32[batch, gamma + 1, d]: the feature before each


def catch_up_with_features(
  draft, draft_state, pending: jax.Array, num_pending: jax.Array, features: jax.Array,
  *, greedy=False,
):  # fmt: skip
  """A feature draft's catch-up: each row's num_pending int32[batch] (0..w) pending tokens
  int32[batch, w], each with the target's feature of the position before it [batch, w, d],
  in one call only as wide as the row that owes most (`lax.switch` over the widths: a
  narrower call costs less on CPUs). Returns the logits after each row's last pending
  token [batch, vocab] (greedy: the greedy token and unusable flag there, [batch] each;
  `chain.draft_call`) and the state."""
  width = pending.shape[1]

  def caller(k: int):
    def call(state):
      result, state = draft_call(
        draft, state, pending[:, :k], num_pending, greedy=greedy, features=features[:, :k]
      )
      return at_position(result, jnp.clip(num_pending - 1, 0, k - 1)), state

    return call

  widest = jnp.clip(jnp.max(num_pending), 1, width)  # rows that sit out owe 0
  return jax.lax.switch(widest - 1, [caller(k) for k in range(1, width + 1)], draft_state)


@dataclasses.dataclass(frozen=True, eq=False)
class FeatureDrafter(ChainDrafter):
  """A chain of gamma tokens from a draft that reads the target's features."""

  def init(self, target, prompts, prompt_lengths, num_new_positions):
    target_state, last_token, features = target.init_state_with_features(
      prompts, prompt_lengths, num_new_positions
    )  # features: [batch, prompt_length, d]
    model_state, pending = self.draft.init_state(
      prompts, prompt_lengths, num_new_positions, features=features
    )
    batch, width = prompts.shape[0], self.gamma + 1
    # The pending last prompt token's pair: the feature of the position before it.
    before = jnp.maximum(prompt_lengths - 2, 0)[:, None, None]  # [batch, 1, 1]
    first = jnp.take_along_axis(features, before, axis=1)[:, 0].astype(jnp.float32)
    first = jnp.where((prompt_lengths >= 2)[:, None], first, 0.0)  # [batch, d]
    pending_features = jnp.zeros((batch, width, first.shape[-1]), jnp.float32)
    state = FeatureState(
      model_state=model_state,
      pending=jnp.full((batch, width), target.pad_id, jnp.int32).at[:, 0].set(pending),
      num_pending=jnp.ones((batch,), jnp.int32),
      pending_features=pending_features.at[:, 0].set(first),
    )
    return target_state, last_token, state

  def catch_up(self, state: FeatureState, owed: jax.Array, greedy: bool):
    """The chain's catch-up, each owed token paired with the target's feature before it."""
    return catch_up_with_features(
      self.draft, state.model_state, state.pending, owed, state.pending_features, greedy=greedy
    )

  def target_call(self, target, target_state, tokens: jax.Array, num_scored: jax.Array) -> Scored:
    """The chain's target call, which also gives the target's features [batch, k, d]."""
    logits, features, target_state = target.extend_with_features(target_state, tokens, num_scored)
    return Scored(logits=logits, target_state=target_state, features=features)

  def advance(self, state: FeatureState, target, target_state, proposal, scored, verdict, active):
    """The target keeps last, x_1..x_n; the draft keeps what it made from the target's
    features (its catch-up ended at last) and owes x_1..x_n, y with their features."""
    target_state = rewind_target(
      target, scored.target_state, target_state.end_index, verdict.n, active
    )
    draft_end = state.model_state.end_index  # [batch]: before this iteration's catch-up
    kept = draft_end + state.num_pending
    model_state = self.draft.rewind(proposal.model_state, jnp.where(active, kept, draft_end))
    pending = verdict.committed()
    return target_state, state.replace(
      model_state=model_state,
      pending=jnp.where(active[:, None], pending, state.pending),
      num_pending=jnp.where(active, verdict.n + 1, state.num_pending),
      pending_features=jnp.where(active[:, None, None], scored.features, state.pending_features),
    )
