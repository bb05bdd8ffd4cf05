"""Step 1 of a speculative iteration: the draft catches up, then proposes its block.

`draft_fixed_block` proposes gamma tokens per row (the paper's loop); `draft_adaptive_block`
proposes up to gamma and lets each row stop early (decoding.adaptive), in a while loop that
ends when every row has stopped, so stopping saves the draft's calls too.

The draft's state lags the committed text by one or two pending tokens (it never saw y,
nor x_gamma when a whole block was accepted); the catch-up call over them gives p_1.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from specsample.core.contract import LanguageModel
from specsample.core.sampling import SamplingConfig, nonfinite_logits
from specsample.decoding.adaptive import confidence, drafted_length
from specsample.decoding.commit import draw

MAX_UNROLLED_GAMMA = 16  # the draft's steps are unrolled up to here (faster on CPU), looped beyond


@struct.dataclass(kw_only=True)
class DraftBlock:
  tokens: jax.Array  # int32[batch, gamma]: x_1..x_gamma (past num_drafted: padding)
  probs: jax.Array | None  # float32[batch, gamma, vocab]: p_1..p_gamma (None when greedy)
  state: Any  # the draft's state: it has seen x_1..x_{m-1}, m = num_drafted
  bad: jax.Array  # bool[batch, gamma]: unusable logits behind p_i
  num_drafted: jax.Array | None  # int32[batch] in 1..gamma; None: all gamma
  steps: jax.Array | int  # batched draft calls made (the catch-up included)


def catch_up(draft: LanguageModel, draft_state, pending: jax.Array, num_pending: jax.Array):
  """The draft consumes each row's 1 or 2 pending tokens (pending int32[batch, 2],
  num_pending int32[batch], 0 for rows that sit out) in one call.

  A 2-token call only when some row owes two: a 1-token call costs less on CPUs (a
  matrix-vector product, and no second position). Returns the logits after each row's
  last pending token [batch, vocab] and the state.
  """
  return jax.lax.cond(
    jnp.any(num_pending == 2),
    _catch_up_two,
    _catch_up_one,
    draft,
    draft_state,
    pending,
    num_pending,
  )


def catch_up_with_features(
  draft, draft_state, pending: jax.Array, num_pending: jax.Array, features: jax.Array
):
  """A feature draft's catch-up: each row's num_pending int32[batch] (0..w) pending tokens
  int32[batch, w], each with the target's feature of the position before it [batch, w, d],
  in one call only as wide as the row that owes most (`lax.switch` over the widths: a
  narrower call costs less on CPUs). Returns the logits after each row's last pending
  token [batch, vocab] and the state."""
  width = pending.shape[1]

  def caller(k: int):
    def call(state):
      logits, state = draft.extend(state, pending[:, :k], num_pending, features=features[:, :k])
      last = jnp.clip(num_pending - 1, 0, k - 1)[:, None, None]  # [batch, 1, 1]
      return jnp.take_along_axis(logits, last, axis=1)[:, 0], state

    return call

  widest = jnp.clip(jnp.max(num_pending), 1, width)  # rows that sit out owe 0
  return jax.lax.switch(widest - 1, [caller(k) for k in range(1, width + 1)], draft_state)


def _catch_up_two(draft, draft_state, pending: jax.Array, num_pending: jax.Array):
  logits, draft_state = draft.extend(draft_state, pending, num_pending)  # [batch, 2, vocab]
  last_pending = jnp.maximum(num_pending - 1, 0)
  return jnp.take_along_axis(logits, last_pending[:, None, None], axis=1)[:, 0], draft_state


def _catch_up_one(draft, draft_state, pending: jax.Array, num_pending: jax.Array):
  logits, draft_state = draft.extend(draft_state, pending[:, :1], num_pending)
  return logits[:, 0], draft_state


def draft_fixed_block(
  draft: LanguageModel,
  draft_state,
  pending: jax.Array,
  num_pending: jax.Array,
  active: jax.Array,
  key: jax.Array,
  *,
  gamma: int,
  sampling: SamplingConfig,
  need_probs: bool,
  pending_features: jax.Array | None = None,
) -> DraftBlock:
  """Catch up, then draw gamma tokens per row (the draft sees x_1..x_{gamma-1}).

  pending_features [batch, w, d]: a feature draft's pending tokens' target features
  (`catch_up_with_features`); its drafting steps pair each token with its own output."""
  step_keys = jax.random.split(key, gamma)
  one = active.astype(jnp.int32)  # [batch]: 1 for rows that advance
  owed = jnp.where(active, num_pending, 0)  # [batch]
  if pending_features is None:
    first_logits, draft_state = catch_up(draft, draft_state, pending, owed)  # [batch, vocab]
  else:
    first_logits, draft_state = catch_up_with_features(
      draft, draft_state, pending, owed, pending_features
    )
  token, probs = draw(step_keys[0], first_logits, sampling, need_probs=need_probs)

  def draft_step(carry, step_key):
    draft_state, token = carry
    logits, draft_state = draft.extend(draft_state, token[:, None], one)  # [batch, 1, vocab]
    next_token, probs = draw(step_key, logits[:, 0], sampling, need_probs=need_probs)
    return (draft_state, next_token), (next_token, probs, nonfinite_logits(logits[:, 0]))

  (draft_state, _), (rest_tokens, rest_probs, rest_bad) = jax.lax.scan(
    draft_step, (draft_state, token), step_keys[1:], unroll=gamma <= MAX_UNROLLED_GAMMA
  )  # rest_tokens: [gamma - 1, batch], rest_probs: [gamma - 1, batch, vocab]
  tokens = jnp.concatenate([token[:, None], rest_tokens.T], axis=1)  # [batch, gamma]
  if need_probs:  # [batch, gamma, vocab]
    probs = jnp.concatenate([probs[:, None], jnp.moveaxis(rest_probs, 0, 1)], axis=1)
  bad = jnp.concatenate([nonfinite_logits(first_logits)[:, None], rest_bad.T], axis=1)
  return DraftBlock(
    tokens=tokens, probs=probs, state=draft_state, bad=bad, num_drafted=None, steps=gamma
  )


@struct.dataclass(kw_only=True)
class _AdaptiveCarry:
  draft_state: Any
  step: jax.Array  # int32[]: tokens x_1..x_step drafted so far (by every drafting row)
  going: jax.Array  # bool[batch]: the row drafts x_{step+1}
  tokens: jax.Array  # int32[batch, gamma]
  probs: jax.Array | None  # float32[batch, gamma, vocab]
  bad: jax.Array  # bool[batch, gamma]
  confident: jax.Array  # bool[batch, gamma]: confidence in x_i >= the row's threshold


def draft_adaptive_block(
  draft: LanguageModel,
  draft_state,
  pending: jax.Array,
  num_pending: jax.Array,
  active: jax.Array,
  key: jax.Array,
  thresholds: jax.Array,
  *,
  gamma: int,
  sampling: SamplingConfig,
  need_probs: bool,
) -> DraftBlock:
  """Catch up, then draw up to gamma tokens per row; a row stops after its first token
  whose confidence is below its threshold (float32[batch]). Rows that stopped sit out
  the remaining steps (their state does not advance); the steps end when all stopped."""
  batch = pending.shape[0]
  step_keys = jax.random.split(key, gamma)
  first_logits, draft_state = catch_up(
    draft, draft_state, pending, jnp.where(active, num_pending, 0)
  )
  token, probs = draw(step_keys[0], first_logits, sampling, need_probs=need_probs)
  sure = confidence(first_logits, token, probs if not sampling.is_greedy else None)
  zeros = jnp.zeros((batch, gamma), jnp.int32)
  init = _AdaptiveCarry(
    draft_state=draft_state,
    step=jnp.ones((), jnp.int32),
    going=active & (sure >= thresholds) & (gamma > 1),
    tokens=zeros.at[:, 0].set(token),
    probs=(
      jnp.zeros((batch, gamma, first_logits.shape[-1]), jnp.float32).at[:, 0].set(probs)
      if need_probs
      else None
    ),
    bad=jnp.zeros((batch, gamma), bool).at[:, 0].set(nonfinite_logits(first_logits)),
    confident=jnp.zeros((batch, gamma), bool).at[:, 0].set(sure >= thresholds),
  )

  def draft_step(c: _AdaptiveCarry) -> _AdaptiveCarry:
    previous = jax.lax.dynamic_index_in_dim(c.tokens, c.step - 1, axis=1)  # [batch, 1]
    logits, state = draft.extend(c.draft_state, previous, c.going.astype(jnp.int32))
    logits = logits[:, 0]  # [batch, vocab]
    step_key = jax.lax.dynamic_index_in_dim(step_keys, c.step, keepdims=False)
    token, probs = draw(step_key, logits, sampling, need_probs=need_probs)
    sure = confidence(logits, token, probs if not sampling.is_greedy else None) >= thresholds
    write = lambda buffer, value: jnp.where(  # noqa: E731 - column `step` of drafting rows
      (jnp.arange(gamma) == c.step).reshape((1, gamma) + (1,) * (buffer.ndim - 2))
      & c.going.reshape((batch,) + (1,) * (buffer.ndim - 1)),
      jnp.expand_dims(value, 1),
      buffer,
    )
    return _AdaptiveCarry(
      draft_state=state,
      step=c.step + 1,
      going=c.going & sure & (c.step + 1 < gamma),
      tokens=write(c.tokens, token),
      probs=write(c.probs, probs) if need_probs else None,
      bad=write(c.bad, nonfinite_logits(logits)),
      confident=write(c.confident, sure),
    )

  final = jax.lax.while_loop(lambda c: jnp.any(c.going), draft_step, init)
  return DraftBlock(
    tokens=final.tokens,
    probs=final.probs,
    state=final.draft_state,
    bad=final.bad,
    num_drafted=drafted_length(final.confident),
    steps=final.step,
  )
