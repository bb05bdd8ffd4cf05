"""Adaptive draft length as a drafter: each row drafts up to gamma tokens and stops after
one the draft is unsure of (decoding.adaptive has the rule and why it stays exact)."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from specsample.core.sampling import nonfinite_logits
from specsample.decoding.adaptive import AdaptiveDraft, confidence, drafted_length
from specsample.decoding.commit import draw
from specsample.decoding.drafters.base import Proposal, Scored
from specsample.decoding.drafters.chain import ChainDrafter, catch_up


@struct.dataclass(kw_only=True)
class AdaptiveState:
  model_state: Any  # the draft's cache: every committed token but the pending ones
  pending: jax.Array  # int32[batch, 2]: committed tokens the draft has not seen
  num_pending: jax.Array  # int32[batch]: 1 or 2
  thresholds: jax.Array  # float32[batch]: each row's confidence bar


@struct.dataclass(kw_only=True)
class _Carry:
  draft_state: Any
  step: jax.Array  # int32[]: tokens x_1..x_step drafted so far (by every drafting row)
  going: jax.Array  # bool[batch]: the row drafts x_{step+1}
  tokens: jax.Array  # int32[batch, gamma]
  probs: jax.Array | None  # float32[batch, gamma, vocab]
  bad: jax.Array  # bool[batch, gamma]
  confident: jax.Array  # bool[batch, gamma]: confidence in x_i >= the row's threshold


@dataclasses.dataclass(frozen=True, eq=False)
class AdaptiveDrafter(ChainDrafter):
  """Up to gamma tokens per row; the target's call is as wide as the longest row's block."""

  adaptive: AdaptiveDraft = AdaptiveDraft()

  def init(self, target, prompts, prompt_lengths, num_new_positions):
    target_state, last_token, chain = super().init(
      target, prompts, prompt_lengths, num_new_positions
    )
    state = AdaptiveState(
      model_state=chain.model_state,
      pending=chain.pending,
      num_pending=chain.num_pending,
      thresholds=self.adaptive.initial_thresholds(prompts.shape[0]),
    )
    return target_state, last_token, state

  def propose(self, state: AdaptiveState, active, key) -> Proposal:
    """Catch up, then draw up to gamma tokens per row; a row stops after its first token
    whose confidence is below its threshold. Rows that stopped sit out the remaining
    steps (their state does not advance); the steps end when all stopped."""
    gamma, sampling, need_probs = self.gamma, self.sampling, self.need_probs
    thresholds = state.thresholds
    batch = state.pending.shape[0]
    step_keys = jax.random.split(key, gamma)
    first_logits, draft_state = catch_up(
      self.draft, state.model_state, state.pending, jnp.where(active, state.num_pending, 0)
    )
    token, probs = draw(step_keys[0], first_logits, sampling, need_probs=need_probs)
    sure = confidence(first_logits, token, probs if not sampling.is_greedy else None)
    zeros = jnp.zeros((batch, gamma), jnp.int32)
    init = _Carry(
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

    def draft_step(c: _Carry) -> _Carry:
      previous = jax.lax.dynamic_index_in_dim(c.tokens, c.step - 1, axis=1)  # [batch, 1]
      logits, draft_state = self.draft.extend(c.draft_state, previous, c.going.astype(jnp.int32))
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
      return _Carry(
        draft_state=draft_state,
        step=c.step + 1,
        going=c.going & sure & (c.step + 1 < gamma),
        tokens=write(c.tokens, token),
        probs=write(c.probs, probs) if need_probs else None,
        bad=write(c.bad, nonfinite_logits(logits)),
        confident=write(c.confident, sure),
      )

    final = jax.lax.while_loop(lambda c: jnp.any(c.going), draft_step, init)
    return Proposal(
      tokens=final.tokens,
      probs=final.probs,
      bad=final.bad,
      num_drafted=drafted_length(final.confident),
      steps=final.step,
      model_state=final.draft_state,
    )

  def score(self, target, target_state, last_token, proposal: Proposal, active) -> Scored:
    """The target's call over [last, x_1..x_m] is only as wide as the longest row needs,
    max(m) + 1 tokens (`lax.switch` over the widths: on CPUs a call costs more the more
    tokens it scores). Logits [batch, gamma + 1, vocab]; positions past a row's m + 1 are
    padding no rule reads."""
    tokens = jnp.concatenate([last_token[:, None], proposal.tokens], axis=1)
    num_scored = jnp.where(active, proposal.num_drafted + 1, 0)  # [batch]
    width = tokens.shape[1]

    def scorer(k: int):
      def score(state):
        logits, state = target.extend(state, tokens[:, :k], num_scored)
        return jnp.pad(logits, ((0, 0), (0, width - k), (0, 0)), mode="edge"), state

      return score

    widest = jnp.max(jnp.where(num_scored > 0, num_scored, 2))  # in 2..gamma + 1
    logits, target_state = jax.lax.switch(
      widest - 2, [scorer(k) for k in range(2, width + 1)], target_state
    )
    return Scored(logits=logits, target_state=target_state)

  def advance(self, state, target, target_state, proposal, scored, verdict, active):
    target_state, state = super().advance(
      state, target, target_state, proposal, scored, verdict, active
    )
    counted = active & ~(verdict.target_bad | verdict.draft_bad)
    thresholds = self.adaptive.update(
      state.thresholds, last_accepted=verdict.n == verdict.num_drafted, counted=counted
    )
    return target_state, state.replace(thresholds=thresholds)
