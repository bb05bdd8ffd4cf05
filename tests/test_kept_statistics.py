"""The loop's statistics describe the tokens the output kept: an iteration cut at
max_new_tokens or EOS after x_1..x_k counts k accepted draft tokens and k kept tokens,
never the accepted draft tokens past the cut, nor a rejection past it."""

from __future__ import annotations

import numpy as np
import pytest

from specsample import SamplingConfig, generate, speculative_generate
from specsample.models import MarkovLM

TARGET = MarkovLM.random(0, 8, max_length=64)  # no EOS: rows end at max_new_tokens
DRAFT = MarkovLM.random(1, 8, max_length=64)
GAMMA = 4
GREEDY = SamplingConfig(temperature=0.0)


def decode(draft, max_new_tokens, prompts=([2, 3],), **kwargs):
  return speculative_generate(
    TARGET, draft, list(prompts), gamma=GAMMA, max_new_tokens=max_new_tokens, **kwargs
  )


def assert_counts_match_the_output(out):
  """kept = the generated tokens, row by row; tokens per target call = all of them /
  the row-iterations; accepted + iterations exceeds the generated tokens by at most one
  (a cut last iteration, whose own token y was not kept), and by none without a cut."""
  stats, lengths = out.stats, np.asarray(out.lengths)
  histogram = np.asarray(stats.accepted_histogram)
  accepted, iterations = np.asarray(stats.accepted), np.asarray(stats.iterations)
  np.testing.assert_array_equal(np.asarray(stats.kept), lengths)
  assert histogram.sum() == iterations.sum()
  assert (histogram * np.arange(GAMMA + 1)).sum() == accepted.sum()
  assert stats.tokens_per_target_call == pytest.approx(lengths.sum() / iterations.sum())
  cut = accepted + iterations - lengths
  assert ((cut == 0) | (cut == 1)).all(), cut
  assert (np.asarray(stats.rejected) <= iterations - cut).all()


@pytest.mark.parametrize(
  "max_new_tokens,histogram",
  [
    (1, [0, 1, 0, 0, 0]),  # one call accepts 4 draft tokens, the output keeps x_1
    (2, [0, 0, 1, 0, 0]),
    (5, [0, 0, 0, 0, 1]),  # one whole iteration: x_1..x_4, y
    (7, [0, 0, 1, 0, 1]),  # then one that accepts 4, of which the budget keeps 2
  ],
)
def test_statistics_count_only_kept_tokens_at_the_budget(max_new_tokens, histogram):
  out = decode(TARGET, max_new_tokens)  # the draft is the target: every token is accepted
  assert int(out.lengths[0]) == max_new_tokens
  assert np.asarray(out.stats.accepted_histogram).tolist() == histogram
  assert out.stats.tokens_per_target_call == pytest.approx(max_new_tokens / sum(histogram))
  assert int(np.sum(out.stats.rejected)) == 0 and out.stats.alpha == 1.0
  assert_counts_match_the_output(out)


def test_a_cut_iteration_counts_no_rejection_past_the_budget():
  """With a different draft, rejections happen; one past the budget is not counted."""
  for max_new_tokens in range(1, 12):
    out = decode(DRAFT, max_new_tokens, prompts=[[2, 3], [4], [5, 6, 7], [1]] * 8, seed=3)
    assert_counts_match_the_output(out)
    assert (np.asarray(out.stats.rejected) <= np.asarray(out.stats.iterations)).all()


def test_statistics_count_only_kept_tokens_at_eos():
  eos_target = MarkovLM(TARGET.logits_table, eos_id=1, max_length=64)
  eos_draft = MarkovLM(DRAFT.logits_table, eos_id=1, max_length=64)
  prompts = [[2, 3], [4], [5, 6, 7], [1], [6]] * 10
  for draft in (eos_target, eos_draft):
    for temperature in (0.0, 1.0):
      out = speculative_generate(
        eos_target, draft, prompts, gamma=GAMMA, max_new_tokens=24,
        sampling=SamplingConfig(temperature=temperature), seed=5,
      )  # fmt: skip
      lengths, tokens = np.asarray(out.lengths), np.asarray(out.tokens)
      ended = [row[n - 1] == 1 for row, n in zip(tokens, lengths, strict=True)]
      assert any(ended)
      assert_counts_match_the_output(out)


def test_greedy_outputs_do_not_change_with_the_statistics():
  prompts = [[2, 3], [4], [5, 6, 7], [1]]
  for max_new_tokens in (1, 2, 7, 13):
    plain = generate(TARGET, prompts, max_new_tokens=max_new_tokens, sampling=GREEDY)
    for draft in (TARGET, DRAFT):
      out = decode(draft, max_new_tokens, prompts=prompts, sampling=GREEDY)
      assert out.sequences() == plain.sequences()
