"""Adaptive draft length as a drafter: each row drafts up to gamma tokens and stops after
one the draft is unsure of (decoding.adaptive has the rule and why it stays exact).

It wraps a chain drafter (a token-level draft's, or a feature draft's, which reads the
target's features) and keeps its catch-up, target call and bookkeeping; only how many
tokens each row drafts, and so how wide the target's call is, change. Greedy drafting
reads the draft's confidence off its `GreedyTokens` (a feature draft never builds its
whole vocabulary's logits)."""

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
from specsample.decoding.drafters.chain import ChainDrafter, draft_call, greedy_drafting


@struct.dataclass(kw_only=True)
class AdaptiveState:
  chain: Any  # the wrapped chain drafter's state (its draft's cache, pending tokens, ...)
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
class AdaptiveDrafter:
  """Up to gamma tokens per row from `chain`'s draft; the target's call is as wide as the
  longest row's block."""

  chain: ChainDrafter  # a ChainDrafter or a FeatureDrafter
  adaptive: AdaptiveDraft = AdaptiveDraft()

  @property
  def gamma(self) -> int:
    return self.chain.gamma

  def cache_positions(self, max_new_tokens: int) -> int:
    return self.chain.cache_positions(max_new_tokens)

  def init(self, target, prompts, prompt_lengths, num_new_positions):
    target_state, last_token, chain = self.chain.init(
      target, prompts, prompt_lengths, num_new_positions
    )
    thresholds = self.adaptive.initial_thresholds(prompts.shape[0])
    return target_state, last_token, AdaptiveState(chain=chain, thresholds=thresholds)

  def propose(self, state: AdaptiveState, active, key) -> Proposal:
    """Catch up, then draw up to gamma tokens per row; a row stops after its first token
    whose confidence is below its threshold. Rows that stopped sit out the remaining
    steps (their state does not advance); the steps end when all stopped."""
    chain = self.chain
    gamma, sampling, need_probs = chain.gamma, chain.sampling, chain.need_probs
    greedy = greedy_drafting(sampling, need_probs)
    thresholds = state.thresholds
    batch = active.shape[0]
    step_keys = jax.random.split(key, gamma)

    def read_draft(result, step_key):
      """(token, probs, sureness, bad) [batch] each from one position of a draft call's
      result (its logits, or greedy its `GreedyTokens`)."""
      if greedy:  # GreedyTokens
        return result.tokens, None, result.top_probability, result.bad
      token, probs = draw(step_key, result, sampling, need_probs=need_probs)
      sure = confidence(result, token, probs if not sampling.is_greedy else None)
      return token, probs, sure, nonfinite_logits(result)

    owed = jnp.where(active, state.chain.num_pending, 0)  # [batch]
    first, draft_state = chain.catch_up(state.chain, owed, greedy)
    token, probs, sure, bad = read_draft(first, step_keys[0])
    zeros = jnp.zeros((batch, gamma), jnp.int32)
    init = _Carry(
      draft_state=draft_state,
      step=jnp.ones((), jnp.int32),
      going=active & (sure >= thresholds) & (gamma > 1),
      tokens=zeros.at[:, 0].set(token),
      probs=(
        jnp.zeros((batch, gamma, probs.shape[-1]), jnp.float32).at[:, 0].set(probs)
        if need_probs
        else None
      ),
      bad=jnp.zeros((batch, gamma), bool).at[:, 0].set(bad),
      confident=jnp.zeros((batch, gamma), bool).at[:, 0].set(sure >= thresholds),
    )

    def draft_step(c: _Carry) -> _Carry:
      previous = jax.lax.dynamic_index_in_dim(c.tokens, c.step - 1, axis=1)  # [batch, 1]
      result, draft_state = draft_call(
        chain.draft, c.draft_state, previous, c.going.astype(jnp.int32), greedy=greedy
      )
      step_key = jax.lax.dynamic_index_in_dim(step_keys, c.step, keepdims=False)
      token, probs, sure, bad = read_draft(jax.tree.map(lambda a: a[:, 0], result), step_key)
      sure = sure >= thresholds
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
        bad=write(c.bad, bad),
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
    """The chain's target call over [last, x_1..x_m], only as wide as the longest row
    needs, max(m) + 1 tokens (`lax.switch` over the widths: on CPUs a call costs more the
    more tokens it scores). Logits [batch, gamma + 1, vocab] (and a feature draft's
    features [batch, gamma + 1, d]); positions past a row's m + 1 are padding nothing
    reads."""
    tokens = jnp.concatenate([last_token[:, None], proposal.tokens], axis=1)
    num_scored = jnp.where(active, proposal.num_drafted + 1, 0)  # [batch]
    width = tokens.shape[1]

    def scorer(k: int):
      def score(state):
        scored = self.chain.target_call(target, state, tokens[:, :k], num_scored)
        pad = lambda a: jnp.pad(  # noqa: E731 - [batch, k, ...] -> [batch, width, ...]
          a, ((0, 0), (0, width - k)) + ((0, 0),) * (a.ndim - 2), mode="edge"
        )
        return scored.replace(
          logits=pad(scored.logits),
          features=None if scored.features is None else pad(scored.features),
        )

      return score

    widest = jnp.max(jnp.where(num_scored > 0, num_scored, 2))  # in 2..gamma + 1
    return jax.lax.switch(widest - 2, [scorer(k) for k in range(2, width + 1)], target_state)

  def verify(self, key, proposal: Proposal, scored: Scored, active):
    return self.chain.verify(key, proposal, scored, active)

  def advance(self, state, target, target_state, proposal, scored, verdict, active):
    target_state, chain = self.chain.advance(
      state.chain, target, target_state, proposal, scored, verdict, active
    )
    counted = active & ~(verdict.target_bad | verdict.draft_bad)
    thresholds = self.adaptive.update(
      state.thresholds, last_accepted=verdict.n == verdict.num_drafted, counted=counted
    )
    return target_state, AdaptiveState(chain=chain, thresholds=thresholds)
