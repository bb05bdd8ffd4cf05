"""Adaptive draft length: exact at every temperature / top-k / top-p / rule, greedy
identical on T5 and the decoder-only model, and a deliberately wrong stopping rule fails
the same sequence-level test."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tiny_models import greedy_case
from toy_pairs import (  # names test_tree.py imports too (no logic)
  SamplingCase,
  assert_every_prompt_fits,
  assert_no_prompt_fits,
  batched_prompts,
  make_pair,
  speculative_greedy_equals_plain,
)

from specsample import AdaptiveDraft, SamplingConfig, speculative_generate
from specsample.decoding import clear_compiled_programs
from specsample.decoding.drafters import adaptive as adaptive_drafter

ROWS_PER_PROMPT = 6000

CASES = [
  # rule, (temperature, top_k, top_p, gamma, max_new_tokens, order, eos_id), adaptive
  ("token", SamplingCase(1.0, 0, 1.0, 3, 3, 1, None), AdaptiveDraft(threshold=0.4)),
  ("token", SamplingCase(0.5, 0, 1.0, 4, 3, 1, None),
   AdaptiveDraft(threshold=0.6, target_acceptance=None)),
  ("token", SamplingCase(1.0, 3, 0.9, 5, 4, 2, 1), AdaptiveDraft(threshold=0.3, step=0.2)),
  ("block", SamplingCase(1.0, 0, 1.0, 3, 3, 1, None), AdaptiveDraft(threshold=0.4)),
  ("block", SamplingCase(1.5, 4, 1.0, 4, 4, 1, None),
   AdaptiveDraft(threshold=0.3, target_acceptance=None)),
  ("block", SamplingCase(1.0, 0, 0.8, 5, 4, 2, 1), AdaptiveDraft(threshold=0.5, step=0.2)),
]  # fmt: skip


def _run(rule: str, case: SamplingCase, adaptive: AdaptiveDraft):
  return case.samples(ROWS_PER_PROMPT, seed=99, verification=rule, adaptive=adaptive)


@pytest.mark.slow
@pytest.mark.parametrize("rule,case,adaptive", CASES)
def test_adaptive_draft_length_is_lossless(rule, case, adaptive):
  target, sampling, out = _run(rule, case, adaptive)
  assert_every_prompt_fits(target, out, case.max_new_tokens, sampling)
  # Informative: rows stopped early in some iterations and drafted in full in others.
  drafted, iterations = np.asarray(out.stats.drafted), np.asarray(out.stats.iterations)
  gamma = case.gamma
  assert iterations.sum() < drafted.sum() < gamma * iterations.sum(), (drafted.sum(), gamma)
  assert 0.2 < out.stats.alpha < 0.98


def _drop_the_unconfident_token(confident):
  """WRONG: proposes only the leading confident tokens (x_1 always), so whether x_i is
  proposed depends on x_i itself."""
  leading = jnp.sum(jnp.cumprod(confident, axis=1), axis=1).astype(jnp.int32)
  return jnp.clip(leading, 1, confident.shape[1])


@pytest.mark.slow
def test_a_stopping_rule_that_looks_at_the_proposed_token_fails_the_same_test(monkeypatch):
  clear_compiled_programs(speculative_only=True)  # the patched function must be traced
  monkeypatch.setattr(adaptive_drafter, "drafted_length", _drop_the_unconfident_token)
  try:
    target, sampling, out = _run(
      "token",
      SamplingCase(1.0, 0, 1.0, 3, 3, 1, None),
      AdaptiveDraft(threshold=0.5, target_acceptance=None),
    )
  finally:
    clear_compiled_programs(speculative_only=True)
  assert_no_prompt_fits(target, out, 3, sampling)


def test_threshold_zero_is_the_fixed_gamma_loop_token_for_token():
  """Nobody stops at threshold 0: same draws, same verdicts, same output as fixed gamma
  (the adaptive loop's buffers, width switch and masks change nothing else)."""
  target, draft = make_pair(seed=4, vocab=7)
  prompts = batched_prompts(20)
  for rule, temperature in (("token", 1.0), ("block", 0.7), ("greedy", 0.0)):
    common = dict(
      gamma=4,
      max_new_tokens=6,
      sampling=SamplingConfig(temperature=temperature),
      verification=rule,
      seed=5,
    )
    fixed = speculative_generate(target, draft, prompts, **common)
    adaptive = speculative_generate(
      target,
      draft,
      prompts,
      adaptive=AdaptiveDraft(threshold=0.0, target_acceptance=None),
      **common,
    )
    assert adaptive.sequences() == fixed.sequences(), rule
    np.testing.assert_array_equal(adaptive.stats.drafted, fixed.stats.drafted)
    assert int(adaptive.stats.draft_calls) == int(fixed.stats.draft_calls)


def test_trace_records_each_rows_proposal_length():
  target, draft = make_pair(seed=6, vocab=6)
  out = speculative_generate(
    target,
    draft,
    [[1], [2, 3]],
    gamma=5,
    max_new_tokens=10,
    sampling=SamplingConfig(temperature=1.0),
    adaptive=AdaptiveDraft(threshold=0.5),
    trace=True,
  )
  lengths = [len(drafts) for row in range(2) for drafts, _, _ in out.trace.row(row)]
  assert all(1 <= length <= 5 for length in lengths)
  assert len(set(lengths)) > 1, lengths
  for row in range(2):
    for drafts, accepted, _ in out.trace.row(row):
      assert accepted <= len(drafts)
  assert sum(lengths) == int(np.sum(out.stats.drafted))


def test_controller_moves_thresholds_towards_its_target_within_bounds():
  adaptive = AdaptiveDraft(threshold=0.5, target_acceptance=0.25, step=0.4, max_threshold=0.9)
  thresholds = adaptive.initial_thresholds(3)
  last_accepted = jnp.array([True, False, False])
  counted = jnp.array([True, True, False])
  moved = adaptive.update(thresholds, last_accepted=last_accepted, counted=counted)
  np.testing.assert_allclose(moved, [0.5 - 0.4 * 0.75, 0.5 + 0.4 * 0.25, 0.5], rtol=1e-6)
  for _ in range(10):
    moved = adaptive.update(moved, last_accepted=last_accepted, counted=counted)
  np.testing.assert_allclose(moved, [0.0, 0.9, 0.5], atol=1e-6)
  fixed = AdaptiveDraft(threshold=0.5, target_acceptance=None)
  np.testing.assert_array_equal(
    fixed.update(thresholds, last_accepted=last_accepted, counted=counted), thresholds
  )


@pytest.mark.parametrize(
  "changes,message",
  [
    (dict(threshold=1.5), "threshold must be in"),
    (dict(target_acceptance=1.0), "target_acceptance must be in"),
    (dict(min_threshold=0.8, max_threshold=0.2), "min_threshold"),
    (dict(step="big"), "must be a number"),
  ],
)
def test_bad_settings_are_refused(changes, message):
  with pytest.raises((ValueError, TypeError), match=message):
    AdaptiveDraft(**changes)


def test_custom_rules_and_bad_values_are_refused():
  target, draft = make_pair(seed=1, vocab=5)

  def rule(key, x, p, q):  # pragma: no cover - refused before tracing
    raise AssertionError

  with pytest.raises(ValueError, match="custom rule"):
    speculative_generate(target, draft, [[1]], max_new_tokens=3, verification=rule, adaptive=True)
  with pytest.raises(TypeError, match="adaptive must be"):
    speculative_generate(target, draft, [[1]], max_new_tokens=3, adaptive=0.5)


def _greedy_identical(family, gamma, max_new_tokens):
  target, draft, prompts = greedy_case(family)
  for adaptive in (AdaptiveDraft(), AdaptiveDraft(threshold=0.9, target_acceptance=None)):
    spec = speculative_greedy_equals_plain(
      target, draft, prompts, (gamma,), max_new_tokens, adaptive=adaptive
    )
    drafted, iterations = np.asarray(spec.stats.drafted), np.asarray(spec.stats.iterations)
    assert drafted.sum() < gamma * iterations.sum()  # some rows stopped early


def test_greedy_identical_on_t5():
  _greedy_identical("t5", gamma=4, max_new_tokens=12)


def test_greedy_identical_on_the_decoder_only_model():
  _greedy_identical("decoder_only", gamma=5, max_new_tokens=14)


def test_a_batch_with_rows_done_early_keeps_going():
  """Rows that ended sit out: the width switch ignores them (no row still decoding is cut)."""
  target, draft = make_pair(seed=8, vocab=6, eos_id=1)
  spec = speculative_greedy_equals_plain(target, draft, batched_prompts(4), (6,), 9, adaptive=True)
  # Rows really ended at different steps (the plain output's rows: they are equal).
  assert len({len(s) for s in spec.sequences()}) > 1
  assert jax.numpy.all(spec.lengths > 0)
