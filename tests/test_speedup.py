"""The speedup model against hand-computed values of the paper's formulas."""

from __future__ import annotations

import math

import jax.numpy as jnp
import pytest

from specsample.core import (
  best_gamma,
  expected_accepted_tokens,
  expected_tokens_per_iteration,
  mean_acceptance_probability,
  theoretical_speedup,
)


def test_expected_tokens():
  # (1 - 0.5^4) / (1 - 0.5) = 1.875 = 1 + 0.5 + 0.25 + 0.125
  assert expected_tokens_per_iteration(0.5, 3) == pytest.approx(1.875)
  assert expected_tokens_per_iteration(1.0, 3) == 4.0
  assert expected_tokens_per_iteration(0.0, 5) == 1.0
  assert expected_accepted_tokens(2 / 3, 2) == pytest.approx(10 / 9)  # the golden case


def test_speedup_formula():
  # Paper, alpha = 0.8, gamma = 5, c = 0.05: (1 - 0.8^6) / (0.2 * 1.25) = 2.95
  assert theoretical_speedup(0.8, 5, 0.05) == pytest.approx((1 - 0.8**6) / (0.2 * 1.25))
  assert theoretical_speedup(0.8, 5, 0.05) == pytest.approx(2.951424)
  # With verification costing r = 2 target steps: same numerator, denominator 0.25 + 2.
  assert theoretical_speedup(0.8, 5, 0.05, r=2.0) == pytest.approx(3.68928 / 2.25)


def test_best_gamma_is_the_argmax():
  for alpha, c, r in [(0.8, 0.05, 1.0), (0.6, 0.1, 1.0), (0.9, 0.02, 2.0), (0.3, 0.5, 1.0)]:
    speedups = {g: theoretical_speedup(alpha, g, c, r) for g in range(1, 11)}
    assert best_gamma(alpha, c, r) == max(speedups, key=speedups.get)
  assert best_gamma(0.99, 0.0, 1.0, max_gamma=7) == 7  # free drafts: draft as much as allowed
  # Measured verify costs per gamma: an expensive long verify pass moves the optimum down.
  ratios = {1: 1.2, 2: 1.3, 3: 1.4, 4: 3.0, 5: 3.2}
  expected = max(ratios, key=lambda g: theoretical_speedup(0.8, g, 0.05, ratios[g]))
  assert best_gamma(0.8, 0.05, ratios) == expected == 3
  assert best_gamma(0.8, 0.05, 1.0) > 3


def test_mean_acceptance_probability():
  p = jnp.array([[2 / 3, 1 / 3], [0.5, 0.5]])
  q = jnp.array([[1 / 3, 2 / 3], [0.5, 0.5]])
  assert float(mean_acceptance_probability(p, q)) == pytest.approx((2 / 3 + 1.0) / 2)


@pytest.mark.parametrize(
  "call",
  [
    lambda: expected_tokens_per_iteration(1.2, 3),
    lambda: expected_tokens_per_iteration(0.5, -1),
    lambda: theoretical_speedup(0.5, 3, -0.1),
    lambda: theoretical_speedup(0.5, 3, 0.1, r=0.0),
  ],
)
def test_bad_arguments(call):
  with pytest.raises(ValueError):
    call()


# --- the measured speedup: one definition, per generated token --------------------------


def test_measured_speedup_is_the_ratio_of_times_per_token():
  from specsample.bench.timing import measured_speedup, seconds_per_token

  assert measured_speedup(2.0, 100, 1.0, 100) == pytest.approx(2.0)  # same tokens: times
  # 13.2 ms/token plainly over 20 tokens, 14.6 ms/token speculatively over 90 tokens
  assert measured_speedup(0.264, 20, 1.314, 90) == pytest.approx(13.2 / 14.6)
  assert seconds_per_token(1.5, 3) == 0.5
  for bad in (0, -1, 2.5, True):
    with pytest.raises(ValueError, match="at least one generated token"):
      seconds_per_token(1.0, bad)


def _comparison(spec_tokens, ar_tokens, spec_seconds, ar_seconds):
  """A Comparison of one row each, with outputs of the given lengths."""
  import numpy as np

  from specsample.cli.compare import Comparison
  from specsample.decoding import DecodingStats, GenerationOutput

  def output(length, gamma):
    stats = DecodingStats(
      target_calls=np.int32(length), draft_calls=np.int32(0), iterations=np.array([length]),
      drafted=np.zeros(1, int), accepted=np.zeros(1, int), rejected=np.zeros(1, int),
      accepted_histogram=None if gamma == 0 else np.array([length] + [0] * gamma),
    )  # fmt: skip
    tokens = np.full((1, 100), 0, np.int32)
    return GenerationOutput(tokens=tokens, lengths=np.array([length]), stats=stats)

  return Comparison(
    speculative=output(spec_tokens, 4), autoregressive=output(ar_tokens, 0),
    speculative_seconds=spec_seconds, autoregressive_seconds=ar_seconds,
    speculative_compile_seconds=1.0, autoregressive_compile_seconds=1.0,
  )  # fmt: skip


def test_headline_speedup_equals_ratio_of_per_token_figures():
  """Sampled outputs of different lengths: total times would give 0.20x here; per token,
  13.2 -> 14.6 ms/token is 0.90x, and the line says so."""
  import re

  from specsample.cli.compare import summary_line

  comparison = _comparison(spec_tokens=90, ar_tokens=20, spec_seconds=1.314, ar_seconds=0.264)
  assert comparison.speedup == pytest.approx(13.2 / 14.6)
  line = summary_line(comparison)
  found = re.search(
    r"speedup ([\d.]+)x over autoregressive \(([\d.]+) -> ([\d.]+) ms/token\)", line
  )
  assert found, line
  speedup, plain_ms, spec_ms = map(float, found.groups())
  assert (plain_ms, spec_ms) == (13.2, 14.6)
  assert speedup == pytest.approx(plain_ms / spec_ms, abs=0.005)


def test_headline_speedup_of_a_sampled_run_equals_ratio_of_per_token_figures():
  """A real side-by-side run at temperature 1 (toy models): the outputs differ in
  length, and the headline is still the ratio of the two ms/token figures."""
  from specsample import SamplingConfig
  from specsample.cli.compare import compare
  from specsample.decoding import SpeculativeSettings
  from specsample.models import MarkovLM

  target = MarkovLM.random(0, 8, eos_id=1, max_length=64)
  draft = MarkovLM.random(1, 8, eos_id=1, max_length=64)
  settings = SpeculativeSettings(gamma=3, max_new_tokens=24, sampling=SamplingConfig(1.0))
  comparison = compare(target, draft, [[2, 3], [4], [5, 6]], settings, seed=1, repeats=1)
  spec, plain = comparison.tokens("speculative"), comparison.tokens("autoregressive")
  assert spec != plain  # the case the per-token definition is for
  ratio = comparison.ms_per_token("autoregressive") / comparison.ms_per_token("speculative")
  assert comparison.speedup == pytest.approx(ratio)


def test_bench_and_eval_speedups_are_per_token():
  """The bench's sweep, batch and phase points and the eval report use the same rule."""
  from specsample.bench.pair_report import BatchPoint, SweepPoint
  from specsample.bench.phases import PhaseBreakdown
  from specsample.eval.report import aggregate

  nan = float("nan")
  sweep = SweepPoint(
    gamma=2, shape="token", temperature=1.0, alpha=0.5, tokens_per_target_call=2.0,
    accepted_histogram=[1, 1, 1], speculative_seconds=1.314, autoregressive_seconds=0.264,
    target_calls=3, new_tokens=90, autoregressive_tokens=20, predicted_paper=nan,
    predicted_with_r=nan, model_seconds_per_iteration=nan,
  )  # fmt: skip
  assert sweep.speedup == pytest.approx(13.2 / 14.6)
  batch = BatchPoint(
    batch_size=4, gamma=2, temperature=1.0, speculative_seconds=1.314,
    autoregressive_seconds=0.264, new_tokens=90, autoregressive_tokens=20,
  )  # fmt: skip
  assert batch.speedup == pytest.approx(13.2 / 14.6)
  phases = PhaseBreakdown(
    gamma=2, temperature=1.0, rule="token", iterations=40, tokens=20, speculative_tokens=90,
    speculative_seconds=1.314, model_calls_seconds=1.0, target_calls_seconds=0.8,
    prefill_seconds=0.1, target_prefill_seconds=0.05, autoregressive_seconds=0.264,
    autoregressive_calls_seconds=0.2,
  )  # fmt: skip
  assert phases.speedup == pytest.approx(13.2 / 14.6)
  assert phases.speedup_without_prefill == pytest.approx((0.214 / 20) / (1.214 / 90))
  # The cost model at the runs' 90 / 40 tokens per call: 2 draft calls and a 3-row call.
  target_seconds = {1: 0.01, 3: 0.012}
  predicted = (90 / 40) * 0.01 / (2 * 0.001 + 0.012)
  assert phases.predicted_without_prefill(0.001, target_seconds) == pytest.approx(predicted)
  assert phases.efficiency_without_prefill(0.001, target_seconds) == pytest.approx(
    (0.214 / 20) / (1.214 / 90) / predicted
  )
  assert math.isnan(phases.predicted_without_prefill(0.001, {1: 0.01}))
  record = {
    "accepted": 10, "rejected": 5, "iterations": 10, "target_seconds": 0.264,
    "speculative_seconds": 1.314, "target_tokens": 20, "speculative_tokens": 90,
    "target_output": "a", "speculative_output": "b",
  }  # fmt: skip
  totals = aggregate([record])
  assert totals["speedup"] == pytest.approx(13.2 / 14.6)
  assert totals["tokens_per_target_call"] == pytest.approx(9.0)
