"""Sequence-level losslessness: speculative samples follow the target's exact distribution.

For small Markov models the probability of every whole output sequence is computable
(MarkovLM.exact_distribution). Each case below draws many rows in ONE batched call
(rows with different prompts and lengths, accepting different numbers of tokens) and
tests the empirical distribution of whole sequences against the exact one per prompt
with a chi-square test at level SIGNIFICANCE (fixed seeds). A deliberately broken rule
must fail the very same test.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from toy_pairs import (
  assert_every_prompt_fits,
  assert_no_prompt_fits,
  batched_prompts,
  make_pair,
  speculative_samples,
)

from specsample import SamplingConfig, generate
from specsample.core.verification import Verdict

ROWS_PER_PROMPT = 6000


CASES = [
  # rule, temperature, top_k, top_p, gamma, max_new_tokens, order, eos_id
  # (each rule's rows spelled out: the rules are tested on settings of their own)
  ("token", 1.0, 0, 1.0, 1, 3, 1, None),
  ("token", 0.5, 0, 1.0, 3, 3, 1, None),
  ("token", 1.5, 0, 1.0, 5, 3, 1, None),
  ("token", 1.0, 3, 1.0, 2, 4, 1, None),
  ("token", 1.0, 0, 0.8, 4, 3, 1, None),
  ("token", 1.0, 4, 0.9, 3, 5, 2, 1),
  ("block", 1.0, 0, 1.0, 2, 3, 1, None),
  ("block", 0.5, 0, 1.0, 4, 3, 1, None),
  ("block", 1.5, 0, 1.0, 1, 3, 1, None),
  ("block", 1.0, 4, 1.0, 3, 4, 1, None),
  ("block", 1.0, 0, 0.7, 5, 3, 1, None),
  ("block", 1.5, 0, 0.9, 5, 5, 2, 1),
]


@pytest.mark.slow
@pytest.mark.parametrize("rule,temperature,top_k,top_p,gamma,max_new_tokens,order,eos_id", CASES)
def test_speculative_sequences_follow_exact_target_distribution(
  rule, temperature, top_k, top_p, gamma, max_new_tokens, order, eos_id
):
  target, sampling, out = speculative_samples(
    gamma + 10 * order, ROWS_PER_PROMPT, order=order, eos_id=eos_id, temperature=temperature,
    top_k=top_k, top_p=top_p, gamma=gamma, max_new_tokens=max_new_tokens, seed=1234,
    verification=rule,
  )  # fmt: skip
  assert_every_prompt_fits(target, out, max_new_tokens, sampling)
  # The case is informative: the draft is neither always right nor always wrong, and
  # rows accepted different numbers of tokens.
  histogram = np.asarray(out.stats.accepted_histogram)
  assert histogram[0] > 0 and histogram[1:].sum() > 0, histogram
  assert 0.2 < out.stats.alpha < 0.98


@pytest.mark.slow
def test_autoregressive_baseline_follows_exact_distribution():
  target, _ = make_pair(seed=3, vocab=6, order=2, eos_id=1)
  sampling = SamplingConfig(temperature=1.0, top_p=0.9)
  out = generate(target, batched_prompts(ROWS_PER_PROMPT), max_new_tokens=4, sampling=sampling)
  assert_every_prompt_fits(target, out, 4, sampling)


def accept_every_draft_token(key, draft_tokens, draft_probs, target_probs) -> Verdict:
  """A WRONG rule: keeps every draft token and samples the bonus from the target."""
  batch, gamma = draft_tokens.shape
  bonus = jax.random.categorical(key, jnp.log(target_probs[:, gamma]))
  return Verdict(jnp.full((batch,), gamma, jnp.int32), bonus.astype(jnp.int32))


def forget_the_residual(key, draft_tokens, draft_probs, target_probs) -> Verdict:
  """A subtly WRONG rule: token-wise acceptance, but resamples from q instead of norm(q - p)."""
  batch, gamma = draft_tokens.shape
  accept_key, sample_key = jax.random.split(key)
  p_x = jnp.take_along_axis(draft_probs, draft_tokens[..., None], -1)[..., 0]
  q_x = jnp.take_along_axis(target_probs[:, :gamma], draft_tokens[..., None], -1)[..., 0]
  accepted = jax.random.uniform(accept_key, (batch, gamma)) * p_x < q_x
  n = jnp.sum(jnp.cumprod(accepted, axis=1), axis=1).astype(jnp.int32)
  q_n = jnp.take_along_axis(target_probs, n[:, None, None], axis=1)[:, 0]
  return Verdict(n, jax.random.categorical(sample_key, jnp.log(q_n)).astype(jnp.int32))


@pytest.mark.slow
@pytest.mark.parametrize("broken_rule", [accept_every_draft_token, forget_the_residual])
def test_broken_rules_fail_the_same_test(broken_rule):
  """The test above has power: rules that are not exact are rejected by it."""
  target, sampling, out = speculative_samples(
    2, ROWS_PER_PROMPT, gamma=2, max_new_tokens=3, seed=1234, verification=broken_rule
  )
  assert_no_prompt_fits(target, out, 3, sampling)
