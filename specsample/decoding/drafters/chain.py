"""The paper's drafter: a draft model proposes a chain of gamma tokens per iteration.

The draft's cache lags the committed text by one or two pending tokens: it never saw y,
nor x_gamma when the whole chain was accepted. Step 1 catches up on them with one extend
whose logits at the last pending token give p_1: over 2 tokens when some row owes 2,
over 1 token otherwise (`lax.cond`; the common case, and cheaper on CPUs). Prompt lookup
(models.ngram, models.lookup_draft) drafts through this drafter too: it is a model.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from specsample.core.contract import LanguageModel, greedy_extend
from specsample.core.sampling import SamplingConfig, nonfinite_logits
from specsample.core.verification import VerificationRule
from specsample.decoding.commit import draw
from specsample.decoding.drafters.base import (
  Proposal,
  Scored,
  Verdict,
  pending_after,
  rewind_target,
  verify_chain,
)

MAX_UNROLLED_GAMMA = 16  # the draft's steps are unrolled up to here (faster on CPU), looped beyond


@struct.dataclass(kw_only=True)
class ChainState:
  """What a token-level draft carries between iterations."""

  model_state: Any  # the draft's cache: every committed token but the pending ones
  pending: jax.Array  # int32[batch, 2]: committed tokens the draft has not seen
  num_pending: jax.Array  # int32[batch]: 1 or 2


def catch_up(
  draft: LanguageModel, draft_state, pending: jax.Array, num_pending: jax.Array, *, greedy=False
):
  """The draft consumes each row's 1 or 2 pending tokens (pending int32[batch, 2],
  num_pending int32[batch], 0 for rows that sit out) in one call.

  A 2-token call only when some row owes two: a 1-token call costs less on CPUs (a
  matrix-vector product, and no second position). Returns the logits after each row's
  last pending token [batch, vocab] (greedy: the draft's greedy token and unusable flag
  there, [batch] each; `draft_call`) and the state.
  """
  return jax.lax.cond(
    jnp.any(num_pending == 2),
    functools.partial(catch_up_two, greedy=greedy),
    functools.partial(catch_up_one, greedy=greedy),
    draft,
    draft_state,
    pending,
    num_pending,
  )


def catch_up_two(draft, draft_state, pending: jax.Array, num_pending: jax.Array, *, greedy=False):
  result, draft_state = draft_call(draft, draft_state, pending, num_pending, greedy=greedy)
  return at_position(result, jnp.maximum(num_pending - 1, 0)), draft_state


def catch_up_one(draft, draft_state, pending: jax.Array, num_pending: jax.Array, *, greedy=False):
  result, draft_state = draft_call(draft, draft_state, pending[:, :1], num_pending, greedy=greedy)
  return jax.tree.map(lambda a: a[:, 0], result), draft_state


def draft_call(draft, draft_state, tokens: jax.Array, num_valid: jax.Array, *, greedy, **features):
  """The draft's `extend` -> (logits [batch, k, vocab], state); greedy: what greedy
  drafting reads of them, (`contract.GreedyTokens` [batch, k] each, state)
  (`contract.greedy_extend`: a feature draft never builds its whole vocabulary's logits)."""
  if greedy:
    return greedy_extend(draft, draft_state, tokens, num_valid, **features)
  return draft.extend(draft_state, tokens, num_valid, **features)


def at_position(result, index: jax.Array):
  """Each array [batch, k, ...] of `result` at each row's position index int32[batch] ->
  [batch, ...]."""

  def take(a):
    where = index.reshape((-1,) + (1,) * (a.ndim - 1))  # [batch, 1, ...]
    return jnp.take_along_axis(a, where, axis=1)[:, 0]

  return jax.tree.map(take, result)


def draw_chain(draft, draft_state, first, active, keys, *, sampling, need_probs):
  """From p_1, draws x_1 and drafts x_2..x_gamma one step at a time (the draft sees
  x_1..x_{gamma-1}; gamma = len(keys)). first: p_1's logits [batch, vocab], or for greedy
  drafting without probabilities (`greedy_drafting`) the draft's `GreedyTokens` there,
  [batch] each. -> Proposal (all gamma)."""
  greedy = greedy_drafting(sampling, need_probs)
  gamma = keys.shape[0]
  one = active.astype(jnp.int32)  # [batch]: 1 for rows that advance
  if greedy:
    token, first_bad, probs = first.tokens, first.bad, None
  else:
    token, probs = draw(keys[0], first, sampling, need_probs=need_probs)
    first_bad = nonfinite_logits(first)

  def draft_step(carry, step_key):
    draft_state, token = carry
    if greedy:  # [batch, 1] each
      greedy_next, draft_state = draft_call(draft, draft_state, token[:, None], one, greedy=True)
      next_token = greedy_next.tokens[:, 0]
      return (draft_state, next_token), (next_token, None, greedy_next.bad[:, 0])
    logits, draft_state = draft.extend(draft_state, token[:, None], one)  # [batch, 1, vocab]
    next_token, probs = draw(step_key, logits[:, 0], sampling, need_probs=need_probs)
    return (draft_state, next_token), (next_token, probs, nonfinite_logits(logits[:, 0]))

  (draft_state, _), (rest_tokens, rest_probs, rest_bad) = jax.lax.scan(
    draft_step, (draft_state, token), keys[1:], unroll=gamma <= MAX_UNROLLED_GAMMA
  )  # rest_tokens: [gamma - 1, batch], rest_probs: [gamma - 1, batch, vocab]
  tokens = jnp.concatenate([token[:, None], rest_tokens.T], axis=1)  # [batch, gamma]
  if need_probs:  # [batch, gamma, vocab]
    probs = jnp.concatenate([probs[:, None], jnp.moveaxis(rest_probs, 0, 1)], axis=1)
  bad = jnp.concatenate([first_bad[:, None], rest_bad.T], axis=1)
  return Proposal(
    tokens=tokens, probs=probs, bad=bad, num_drafted=None, steps=gamma, model_state=draft_state
  )


def greedy_drafting(sampling: SamplingConfig, need_probs: bool) -> bool:
  """Whether a chain is drafted from greedy tokens alone (`contract.greedy_extend`):
  greedy sampling whose verification compares tokens only."""
  return sampling.is_greedy and not need_probs


@dataclasses.dataclass(frozen=True, eq=False)
class ChainDrafter:
  """gamma draft tokens per row and iteration from a token-level draft model."""

  draft: LanguageModel
  gamma: int
  sampling: SamplingConfig
  rule: str | VerificationRule

  @property
  def need_probs(self) -> bool:
    return self.rule != "greedy"  # greedy verification compares tokens only

  def cache_positions(self, max_new_tokens: int) -> int:
    return max_new_tokens + self.gamma + 1  # room for a full block at the end

  def init(self, target, prompts, prompt_lengths, num_new_positions):
    target_state, last_token = target.init_state(prompts, prompt_lengths, num_new_positions)
    model_state, pending = self.draft.init_state(prompts, prompt_lengths, num_new_positions)
    return target_state, last_token, self._state(model_state, pending, target.pad_id)

  def _state(self, model_state, pending: jax.Array, pad_id: int) -> ChainState:
    return ChainState(
      model_state=model_state,
      pending=jnp.stack([pending, jnp.full_like(pending, pad_id)], axis=1),
      num_pending=jnp.ones_like(pending),
    )

  def propose(self, state: ChainState, active, key) -> Proposal:
    owed = jnp.where(active, state.num_pending, 0)  # [batch]
    first, model_state = self.catch_up(state, owed, greedy_drafting(self.sampling, self.need_probs))
    keys = jax.random.split(key, self.gamma)
    return draw_chain(
      self.draft, model_state, first, active, keys,
      sampling=self.sampling, need_probs=self.need_probs,
    )  # fmt: skip

  def catch_up(self, state: ChainState, owed: jax.Array, greedy: bool):
    """The draft's call over the committed tokens it owes, int32[batch] each (0 for rows
    that sit out) -> (p_1's logits [batch, vocab], or with greedy its `GreedyTokens`
    [batch] each; the draft's state)."""
    return catch_up(self.draft, state.model_state, state.pending, owed, greedy=greedy)

  def score(self, target, target_state, last_token, proposal: Proposal, active) -> Scored:
    tokens = jnp.concatenate([last_token[:, None], proposal.tokens], axis=1)  # [batch, gamma + 1]
    return self.target_call(target, target_state, tokens, jnp.where(active, self.gamma + 1, 0))

  def target_call(self, target, target_state, tokens: jax.Array, num_scored: jax.Array) -> Scored:
    """The target's call over tokens int32[batch, k], num_scored int32[batch] of them per
    row -> logits [batch, k, vocab] and its state."""
    logits, target_state = target.extend(target_state, tokens, num_scored)
    return Scored(logits=logits, target_state=target_state)

  def verify(self, key, proposal: Proposal, scored: Scored, active) -> Verdict:
    return verify_chain(self.rule, self.sampling, key, proposal, scored.logits, active)

  def advance(self, state: ChainState, target, target_state, proposal, scored, verdict, active):
    """The target keeps last, x_1..x_n (y is pending); the draft saw x_1..x_{m-1}, so it
    keeps x_1..x_min(n, m-1) and owes y (and x_m)."""
    target_state = rewind_target(
      target, scored.target_state, target_state.end_index, verdict.n, active
    )
    draft_end = state.model_state.end_index  # [batch]: before this iteration's catch-up
    kept = draft_end + state.num_pending + jnp.minimum(verdict.n, verdict.num_drafted - 1)
    model_state = self.draft.rewind(proposal.model_state, jnp.where(active, kept, draft_end))
    pending, num_pending = pending_after(verdict, target.pad_id)
    return target_state, state.replace(
      model_state=model_state,
      pending=jnp.where(active[:, None], pending, state.pending),
      num_pending=jnp.where(active, num_pending, state.num_pending),
    )
