"""The measuring code of `specsample bench`, on toy Markov pairs (fast, exact references)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from toy_pairs import toy_pair

from specsample import SamplingConfig, generate
from specsample.bench import output, pair, timing
from specsample.bench.pair import alpha_along_target_outputs, bench_pair
from specsample.bench.pair_report import BenchSettings, StepCosts
from specsample.bench.timing import time_call
from specsample.core.speedup import expected_tokens_per_iteration

PROMPTS = [[1, 2], [3], [4, 5, 1], [2]]


class FakeClock:
  """perf_counter that advances only when the timed function runs."""

  def __init__(self):
    self.now = 0.0

  def perf_counter(self):
    return self.now


def test_timing_helpers_exclude_the_compiling_first_call(monkeypatch):
  clock = FakeClock()
  durations = iter([100.0, 1.0, 3.0, 2.0] * 2)  # each first call "compiles" for 100 s

  def fn():
    clock.now += next(durations)
    return 0

  monkeypatch.setattr(timing.time, "perf_counter", clock.perf_counter)
  assert timing.interleaved_medians([fn], repeats=3) == [2.0]
  result, _ = time_call(fn, repeats=3)
  assert result.seconds == (1.0, 3.0, 2.0) and result.median == 2.0
  assert result.first_call_seconds == 100.0 and result.compile_seconds == 98.0


def test_step_costs_ratios():
  costs = StepCosts(target_seconds={1: 0.010, 2: 0.012, 3: 0.015}, draft_seconds=0.001)
  assert costs.c == pytest.approx(0.1)
  assert costs.r(1) == pytest.approx(1.2) and costs.r(2) == pytest.approx(1.5)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_analytic_alpha_matches_the_toy_models_exact_overlap(temperature):
  target, draft = toy_pair()
  sampling = SamplingConfig(temperature=temperature)
  out = generate(target, PROMPTS, max_new_tokens=6, sampling=sampling, seed=3)
  sequences, lengths = np.asarray(out.tokens), np.asarray(out.lengths)
  beta = target.acceptance_probabilities(draft, sampling)  # [vocab]: overlap after each token
  expected = []
  for prompt, row, length in zip(PROMPTS, sequences, lengths, strict=True):
    contexts = [prompt[-1]] + row[: length - 1].tolist()
    expected += [beta[c] for c in contexts]
  measured = alpha_along_target_outputs(target, draft, PROMPTS, sequences, lengths, sampling)
  assert measured == pytest.approx(np.mean(expected), abs=1e-6)


@pytest.fixture(scope="module")
def report():
  target, draft = toy_pair()
  settings = BenchSettings(
    gammas=(1, 2, 3), batch_sizes=(1, 3), max_new_tokens=8, repeats=1, cost_repeats=2
  )
  steps = []
  result = bench_pair(target, draft, PROMPTS, settings, progress=steps.append)
  assert len(steps) == pair.bench_steps(settings)
  return result


def test_the_sampled_rows_use_the_sampling_draft(monkeypatch):
  target, draft = toy_pair()
  _, other = toy_pair()
  other = type(other)(other.logits_table * 0.5, eos_id=6)
  seen = []
  for name in ("alpha_along_target_outputs", "_sweep_point", "phase_breakdown", "_batch_point"):
    real = getattr(pair, name)

    def spy(target, used, *args, _name=name, _real=real, **kwargs):
      seen.append((_name, used))
      return _real(target, used, *args, **kwargs)

    monkeypatch.setattr(pair, name, spy)
  settings = BenchSettings(gammas=(1,), shapes=("token",), batch_sizes=(1,), max_new_tokens=4,
                           repeats=1, cost_repeats=1, phase_prompts=1)  # fmt: skip
  bench_pair(target, draft, PROMPTS[:2], settings, sampling_draft=other)
  used = [(name, "draft" if model is draft else "other" if model is other else "?")
          for name, model in seen]  # fmt: skip
  assert used == [
    ("alpha_along_target_outputs", "draft"), ("_sweep_point", "draft"),  # temperature 0
    ("alpha_along_target_outputs", "other"), ("_sweep_point", "other"),  # temperature 1
    ("phase_breakdown", "draft"), ("_batch_point", "draft"),
    ("phase_breakdown", "other"), ("_batch_point", "other"),
  ]  # fmt: skip


def test_sweep_points_follow_the_papers_formulas(report):
  assert len(report.sweep) == 2 * 2 * 3  # temperatures x rules x gammas
  costs = report.costs
  for p in report.sweep:
    expected = expected_tokens_per_iteration(p.alpha, p.gamma)
    assert p.predicted_paper == pytest.approx(expected / (p.gamma * costs.c + 1))
    assert p.predicted_with_r == pytest.approx(expected / (p.gamma * costs.c + costs.r(p.gamma)))
    assert p.efficiency == pytest.approx(p.speedup / p.predicted_with_r)
    per_token = (p.autoregressive_seconds / p.autoregressive_tokens) / (
      p.speculative_seconds / p.new_tokens
    )
    assert p.speedup == pytest.approx(per_token)
    assert len(p.accepted_histogram) == p.gamma + 1
    iterations = sum(p.accepted_histogram)
    assert p.tokens_per_target_call == pytest.approx(p.new_tokens / iterations)
    assert 0 <= p.alpha <= 1
  # Greedy with an identical draft prefix: the same target calls across rules.
  greedy = [p for p in report.sweep if p.temperature == 0.0 and p.gamma == 2]
  assert greedy[0].target_calls == greedy[1].target_calls


def test_batch_points_and_best_gamma(report):
  assert [(b.temperature, b.batch_size) for b in report.batch] == [
    (0.0, 1), (0.0, 3), (1.0, 1), (1.0, 3)
  ]  # fmt: skip
  for b in report.batch:
    assert b.gamma == report.best(b.temperature).gamma and b.new_tokens > 0
  for t in (0.0, 1.0):
    best = report.best(t)
    assert best.speedup == max(
      p.speedup for p in report.sweep if p.temperature == t and p.shape == "token"
    )
    assert report.model_best_gamma(t) in (1, 2, 3)


def test_phase_breakdown_counts_the_same_work_as_the_sweep(report):
  """One breakdown per temperature at its best gamma; it decodes the same prompts with
  the same seed, so its iterations are the sweep point's target calls and its tokens the
  autoregressive steps; the phases add up to the measured speculative time."""
  assert [(p.temperature, p.gamma) for p in report.phases] == [
    (t, report.best(t).gamma) for t in (0.0, 1.0)
  ]
  for phases in report.phases:
    best = report.best(phases.temperature)
    assert phases.iterations == best.target_calls
    sampling = SamplingConfig(temperature=phases.temperature)
    target, _ = toy_pair()
    steps = sum(
      int(generate(target, [p], max_new_tokens=8, sampling=sampling).stats.target_calls)
      for p in PROMPTS
    )
    assert phases.tokens == steps
    per_iteration = (
      phases.draft_per_iteration + phases.verify_per_iteration + phases.bookkeeping_per_iteration
    )
    assert per_iteration * phases.iterations + phases.prefill_seconds == pytest.approx(
      phases.speculative_seconds
    )
    assert phases.step_per_token * phases.tokens + phases.target_prefill_seconds == pytest.approx(
      phases.autoregressive_calls_seconds
    )
    assert min(phases.prefill_seconds, phases.model_calls_seconds) > 0


def test_report_files(report, tmp_path):
  path = tmp_path / "report.json"
  output.write_json(report, path, title="toy")
  data = json.loads(path.read_text())
  for key in ("costs", "analytic_alpha", "sweep", "batch", "best", "settings", "phases"):
    assert key in data
  assert data["phases"][0]["draft_per_iteration"] == pytest.approx(
    report.phases[0].draft_per_iteration
  )
  costs = report.costs
  assert data["phases"][0]["efficiency_without_prefill"] == pytest.approx(
    report.phases[0].efficiency_without_prefill(costs.draft_seconds, costs.target_seconds),
    nan_ok=True,
  )
  point = data["sweep"][0]
  for key in ("speedup", "efficiency", "predicted_paper", "predicted_with_r", "alpha"):
    assert key in point
  assert data["costs"]["r"]["1"] == pytest.approx(report.costs.r(1))
  text = output.markdown(report, title="toy")
  assert text.count("\n| 0 | token |") == 3 and "c = " in text
  phase_rows = text.split("Where the time goes")[1].strip().splitlines()[4:]
  assert [row.split(" | ")[:2] for row in phase_rows] == [
    ["| 0", str(report.best(0.0).gamma)], ["| 1", str(report.best(1.0).gamma)]
  ]  # fmt: skip
  written = output.plot(report, tmp_path, title="toy")
  assert sorted(p.rsplit("/", 1)[-1] for p in written) == [
    "acceptance_histogram.png", "batch_scaling.png", "speedup_vs_gamma.png"
  ]  # fmt: skip
  assert all((tmp_path / name).stat().st_size > 5000 for name in ("batch_scaling.png",))


@pytest.mark.parametrize(
  "kwargs",
  [
    {"gammas": ()},
    {"gammas": (0,)},
    {"shapes": ("tokenwise",)},
    {"shapes": ()},
    {"temperatures": (-1.0,)},
    {"batch_sizes": (0,)},
    {"repeats": 0},
  ],
)
def test_bad_settings(kwargs):
  with pytest.raises(ValueError):
    BenchSettings(**kwargs)


def test_phase_breakdown_rejects_batches_and_empty_input():
  from specsample.bench.phases import phase_breakdown

  target, draft = toy_pair()
  array, lengths = pair.pad_to_width(PROMPTS, 3)
  greedy = SamplingConfig(temperature=0.0)
  with pytest.raises(ValueError, match="batch-1 rows"):
    phase_breakdown(target, draft, [(array, lengths)], gamma=2, sampling=greedy, max_new_tokens=4)
  with pytest.raises(ValueError, match="at least one prompt"):
    phase_breakdown(target, draft, [], gamma=2, sampling=greedy, max_new_tokens=4)


def test_interleaved_medians_time_every_call_once_per_round(monkeypatch):
  """Sweep points time the speculative decode and its autoregressive baseline in the
  same rounds: the first (compiling) run of each is untimed, then they alternate."""
  clock = FakeClock()
  log = []

  def call(name, seconds):
    def run():
      log.append(name)
      clock.now += seconds * (100 if log.count(name) == 1 else 1)
      return 0

    return run

  monkeypatch.setattr(timing.time, "perf_counter", clock.perf_counter)
  medians = timing.interleaved_medians([call("spec", 2.0), call("ar", 3.0)], repeats=3)
  assert medians == [2.0, 3.0]
  assert log == ["spec", "ar"] * 4
