"""Step costs measured once per machine, pair and batch size and kept in the user's cache
directory (specsample.bench.calibration), and gamma="auto" deciding from them with alpha
from a bounded probe (specsample.bench.tuning)."""

from __future__ import annotations

import json
import os

import pytest

from specsample import api
from specsample.bench import calibration, tuning
from specsample.core import SamplingConfig, theoretical_speedup
from specsample.kernels import native
from specsample.models import MarkovLM

GREEDY = SamplingConfig(temperature=0.0)


def pair():
  target = MarkovLM.random(0, 6, scale=2.0)
  noise = MarkovLM.random(1, 6, scale=0.7).logits_table
  return target, MarkovLM(target.logits_table + noise)


class FakeTiming:
  """t_target(k) = 1 + 0.25 (k - 1), t_draft(1) = 0.05; counts the measurements."""

  def __init__(self, monkeypatch):
    self.calls: list[int] = []
    monkeypatch.setattr(calibration, "interleaved_step_seconds", self)

  def __call__(self, steps, prompts, **kwargs):
    self.calls.append(prompts.shape[0])  # the batch size measured
    target = steps[0][0]
    return [1.0 + 0.25 * (k - 1) if model is target else 0.05 for model, k in steps]


def test_costs_are_measured_once_per_machine_pair_and_batch(monkeypatch, step_cost_cache):
  target, draft = pair()
  timing = FakeTiming(monkeypatch)
  costs, kept = calibration.calibrated_costs(target, draft, pair_id="toy", batch=1)
  assert not kept and timing.calls == [1]
  assert costs.c == pytest.approx(0.05) and costs.r[3] == pytest.approx(1.75)
  assert set(costs.r) == set(range(1, calibration.MAX_GAMMA + 1))
  path = step_cost_cache / calibration.CACHE_FILE
  assert calibration.cache_path() == path and len(json.loads(path.read_text())) == 1
  again, kept = calibration.calibrated_costs(target, draft, pair_id="toy", batch=1)
  assert kept and again == costs and timing.calls == [1]  # read back, not measured
  calibration.calibrated_costs(target, draft, pair_id="toy", batch=4)
  calibration.calibrated_costs(target, draft, pair_id="other pair", batch=1)
  assert timing.calls == [1, 4, 1]
  _, kept = calibration.calibrated_costs(target, draft, pair_id="toy", batch=1, recalibrate=True)
  assert not kept and timing.calls == [1, 4, 1, 1]
  monkeypatch.setattr(calibration, "machine_id", lambda: "another machine")
  _, kept = calibration.calibrated_costs(target, draft, pair_id="toy", batch=1)
  assert not kept and len(json.loads(path.read_text())) == 4
  assert not [name for name in os.listdir(step_cost_cache) if name.endswith(".tmp")]


def test_a_damaged_cache_is_said_measured_again_and_rewritten(monkeypatch, step_cost_cache, capsys):
  target, draft = pair()
  timing = FakeTiming(monkeypatch)
  path = step_cost_cache / calibration.CACHE_FILE
  path.write_text('{"half a rec')
  _, kept = calibration.calibrated_costs(target, draft, pair_id="toy", batch=1)
  assert not kept and timing.calls == [1]
  assert "ignoring" in capsys.readouterr().err
  assert len(json.loads(path.read_text())) == 1
  # A record that is not one (a hand edit, an older layout) is measured again too.
  key = next(iter(json.loads(path.read_text())))
  path.write_text(json.dumps({key: {"c": -1, "r": {}}}))
  _, kept = calibration.calibrated_costs(target, draft, pair_id="toy", batch=1)
  assert not kept and timing.calls == [1, 1]


def test_a_failed_write_leaves_the_kept_costs_whole(monkeypatch, step_cost_cache, capsys):
  target, draft = pair()
  FakeTiming(monkeypatch)
  calibration.calibrated_costs(target, draft, pair_id="toy", batch=1)
  path = step_cost_cache / calibration.CACHE_FILE
  before = path.read_text()

  def full_disk(records, out, **kwargs):
    out.write("{")
    raise OSError(28, "No space left on device")

  monkeypatch.setattr(calibration.json, "dump", full_disk)
  costs, kept = calibration.calibrated_costs(target, draft, pair_id="toy", batch=2)
  assert not kept and costs.c > 0  # measured and used all the same
  assert "could not keep them" in capsys.readouterr().err
  assert path.read_text() == before
  assert os.listdir(step_cost_cache) == [calibration.CACHE_FILE]


def test_real_measurement_of_a_toy_pair():
  target, draft = pair()
  costs = calibration.measure_costs(target, draft, 2, max_gamma=3, repeats=2)
  assert set(costs.r) == {1, 2, 3} and costs.c > 0 and costs.target_step_ms > 0
  assert all(r > 0 for r in costs.r.values()) and costs.seconds > 0


def test_the_machine_is_named_by_the_kernels_instruction_sets(monkeypatch):
  if not native.kernel_available():
    pytest.skip(str(native.why_not_available()))
  names = set()
  try:
    for isa in native.supported_instruction_sets():
      monkeypatch.setenv(native.ISA_VARIABLE, isa)
      native.choose_again()
      name = calibration.machine_id()
      assert f"|{isa}/" in name and f"{os.cpu_count()} cores" in name
      names.add(name)
  finally:
    monkeypatch.delenv(native.ISA_VARIABLE)
    native.choose_again()
    native.kernel_available()
  assert len(names) == len(native.supported_instruction_sets())  # costs kept apart


def test_new_kernels_are_timed_anew(monkeypatch):
  """Costs kept for one build of the kernels are not those of the next (an upgrade's)."""
  if not native.kernel_available():
    pytest.skip(str(native.why_not_available()))

  before = calibration.machine_id()
  assert f"kernels {native.build_id()}" in before
  monkeypatch.setattr(native, "build_id", lambda: "another build")
  assert calibration.machine_id() != before


def costs(r: dict[int, float], c: float) -> calibration.Costs:
  return calibration.Costs(c=c, r=r, target_step_ms=1.0, measured="now", seconds=0.0)


def test_one_prompt_needs_a_smaller_margin_than_a_batch():
  table = costs({1: 1.2, 2: 1.4, 3: 1.6}, 0.05)
  one = tuning.choose_gamma(0.6, table, batch=1, max_gamma=3)
  batch = tuning.choose_gamma(0.6, table, batch=4, max_gamma=3)
  expected = {g: theoretical_speedup(0.6, g, 0.05, table.r[g]) for g in (1, 2, 3)}
  assert one.predicted_speedup == pytest.approx(expected) == batch.predicted_speedup
  assert one.gamma == batch.gamma == max(expected, key=expected.get)
  assert 1.15 <= expected[one.gamma] < 1.4
  assert one.pays and not batch.pays
  # A verify call that costs twice a step: not even one prompt speculates.
  assert not tuning.choose_gamma(0.6, costs({1: 2.0, 2: 2.2}, 0.05), batch=1).pays


def test_a_known_alpha_and_kept_costs_decide_without_measuring(monkeypatch):
  target, draft = pair()
  timing = FakeTiming(monkeypatch)

  def no_probe(*args, **kwargs):
    raise AssertionError("probed although alpha was given")

  monkeypatch.setattr(tuning, "probe_alpha", no_probe)
  first = tuning.tune_gamma(target, draft, [[1, 2]], alpha=0.7, pair_id="toy", sampling=GREEDY)
  second = tuning.tune_gamma(target, draft, [[3]], alpha=0.7, pair_id="toy", sampling=GREEDY)
  assert timing.calls == [1]  # measured once, then kept
  assert first.gamma == second.gamma and first.predicted_speedup == second.predicted_speedup
  assert "measured now and kept" in first.summary() and "kept from" in second.summary()
  assert first.alpha == 0.7 and "known" in first.summary()
  with pytest.raises(ValueError, match="alpha"):
    tuning.tune_gamma(target, draft, [[1]], alpha=1.5, pair_id="toy")


def test_the_probe_reads_a_bounded_sample_of_a_large_batch(monkeypatch):
  target, draft = pair()
  FakeTiming(monkeypatch)
  probed = []
  decode = tuning.speculative_decode

  def recorded(target, draft, prompts, settings, **kwargs):
    probed.append((prompts.shape, settings.max_new_tokens))
    return decode(target, draft, prompts, settings, **kwargs)

  monkeypatch.setattr(tuning, "speculative_decode", recorded)
  prompts = [[1 + i % 5, 2 + i % 3] * (1 + i % 4) for i in range(tuning.MAX_WEIGHED_ROWS_CPU)]
  choice = tuning.tune_gamma(target, draft, prompts, pair_id="toy", sampling=GREEDY)
  (((rows, width), new_tokens),) = probed
  assert rows == tuning.PROBE_PROMPTS and new_tokens == tuning.PROBE_NEW_TOKENS
  assert width <= 8  # cut to the probed prompts' own width
  assert 0.0 <= choice.alpha <= 1.0
  assert f"probe of {tuning.PROBE_PROMPTS} prompts" in choice.summary()


def test_a_large_batch_on_a_cpu_decodes_plainly_unmeasured(monkeypatch):
  """Above MAX_WEIGHED_ROWS_CPU rows nothing is probed or timed (at 200 rows that took
  1,000 s to find that no gamma pays); gamma "auto" decodes plainly and says why."""
  target, draft = pair()

  def unexpected(*args, **kwargs):
    raise AssertionError("a large batch was measured")

  for name in ("probe_alpha", "calibrated_costs", "_costs_on"):
    monkeypatch.setattr(tuning, name, unexpected)
  prompts = [[1 + i % 5, 2] for i in range(tuning.MAX_WEIGHED_ROWS_CPU + 1)]
  choice = tuning.tune_gamma(target, draft, prompts, pair_id="toy", sampling=GREEDY)
  assert not choice.pays
  assert f"{len(prompts)} rows" in choice.why_plain() and "plainly" in choice.why_plain()
  plain_calls = []
  plain = api.generate

  def recorded(model, prompts, **kwargs):
    plain_calls.append(len(prompts))
    return plain(model, prompts, **kwargs)

  monkeypatch.setattr(api, "generate", recorded)
  out = api.speculative_generate(
    target, draft, prompts, gamma="auto", max_new_tokens=6, sampling=GREEDY
  )
  assert plain_calls == [len(prompts)]
  assert out.sequences() == plain(target, prompts, max_new_tokens=6, sampling=GREEDY).sequences()
