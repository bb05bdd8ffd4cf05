"""gamma="auto": measured alpha, c, r -> the gamma the speedup model prefers."""

from __future__ import annotations

import argparse
import dataclasses

import jax.numpy as jnp
import pytest

from specsample import SamplingConfig, generate, speculative_generate
from specsample.bench import costs, timing, tuning
from specsample.cli.options import gamma_value as _gamma_value
from specsample.core import theoretical_speedup
from specsample.models import MarkovLM

PROMPTS = [[1, 2], [3], [4, 5, 1]]


def pair():
  """A target and a draft close to it (alpha well inside (0, 1))."""
  target = MarkovLM.random(0, 6, scale=2.0)
  noise = MarkovLM.random(1, 6, scale=0.7).logits_table
  return target, MarkovLM(target.logits_table + noise)


def synthetic_costs(monkeypatch, target, target_seconds: dict[int, float], draft_seconds: float):
  """Replaces the timing with a fixed cost table: t_target(k) and t_draft(1)."""

  def fake(steps, prompts, **kwargs):
    return [target_seconds[k] if model is target else draft_seconds for model, k in steps]

  monkeypatch.setattr(tuning, "interleaved_step_seconds", fake)


@pytest.mark.parametrize(
  "target_seconds, draft_seconds",
  [
    ({k: 1.0 for k in range(1, 10)}, 0.05),  # the paper's accelerator: r = 1
    ({k: 1.0 + 0.3 * (k - 1) for k in range(1, 10)}, 0.05),  # verify cost grows (CPU)
    ({k: 1.0 if k <= 3 else 4.0 for k in range(1, 10)}, 0.02),  # a cliff after 3 tokens
    ({k: 1.0 for k in range(1, 10)}, 0.6),  # an expensive draft
  ],
)
def test_auto_gamma_is_the_argmax_of_the_model_on_a_cost_table(
  monkeypatch, target_seconds, draft_seconds
):
  target, draft = pair()
  synthetic_costs(monkeypatch, target, target_seconds, draft_seconds)
  choice = tuning.tune_gamma(target, draft, PROMPTS, sampling=SamplingConfig(1.0), max_gamma=8)
  c = draft_seconds / target_seconds[1]
  r = {g: target_seconds[g + 1] / target_seconds[1] for g in range(1, 9)}
  assert choice.c == pytest.approx(c) and choice.r == pytest.approx(r)
  speedups = {g: theoretical_speedup(choice.alpha, g, c, r[g]) for g in r}
  assert choice.predicted_speedup == pytest.approx(speedups)
  assert choice.gamma == max(speedups, key=lambda g: (speedups[g], -g))
  assert 0.0 < choice.alpha < 1.0


def test_the_cost_table_moves_the_choice(monkeypatch):
  target, draft = pair()
  flat = {k: 1.0 for k in range(1, 10)}
  synthetic_costs(monkeypatch, target, flat, 0.01)
  long = tuning.tune_gamma(target, draft, PROMPTS, sampling=SamplingConfig(0.0)).gamma
  synthetic_costs(monkeypatch, target, {k: 1.0 if k <= 2 else 5.0 for k in range(1, 10)}, 0.01)
  short = tuning.tune_gamma(target, draft, PROMPTS, sampling=SamplingConfig(0.0)).gamma
  assert short == 1 < long


def test_speculative_generate_with_auto_uses_the_tuned_gamma(monkeypatch):
  target, draft = pair()
  table = {k: 1.0 if k <= 3 else 9.0 for k in range(1, 10)}  # best: gamma 2
  synthetic_costs(monkeypatch, target, table, 0.01)
  expected = tuning.tune_gamma(target, draft, PROMPTS, sampling=SamplingConfig(0.0)).gamma
  greedy = SamplingConfig(0.0)
  out = speculative_generate(
    target, draft, PROMPTS, gamma="auto", max_new_tokens=12, sampling=greedy
  )
  assert out.stats.gamma == expected == 2
  plain = generate(target, PROMPTS, max_new_tokens=12, sampling=greedy)
  assert jnp.array_equal(out.tokens, plain.tokens)  # still the target's greedy output
  assert plain.stats.gamma == 0


def test_auto_decodes_plainly_where_no_gamma_pays(monkeypatch):
  """Verifying 2+ tokens costs 3x one step and the draft a whole step: no gamma is
  predicted to pay, so gamma="auto" decodes the batch plainly (stats.gamma 0), with the
  target's own tokens; a cheap flat cost table speculates."""
  target, draft = pair()
  greedy = SamplingConfig(0.0)
  synthetic_costs(monkeypatch, target, {k: 1.0 if k == 1 else 3.0 for k in range(1, 10)}, 1.0)
  choice = tuning.tune_gamma(target, draft, PROMPTS, sampling=greedy)
  assert not choice.pays and max(choice.predicted_speedup.values()) < 1
  out = speculative_generate(
    target, draft, PROMPTS, gamma="auto", max_new_tokens=12, sampling=greedy
  )
  plain = generate(target, PROMPTS, max_new_tokens=12, sampling=greedy)
  assert out.stats.gamma == 0 and jnp.array_equal(out.tokens, plain.tokens)
  traced = speculative_generate(
    target, draft, PROMPTS, gamma="auto", max_new_tokens=12, sampling=greedy, trace=True
  )
  assert traced.stats.gamma >= 1 and traced.trace is not None  # a trace asks for speculation
  synthetic_costs(monkeypatch, target, {k: 1.0 for k in range(1, 10)}, 0.01)
  assert tuning.tune_gamma(target, draft, PROMPTS, sampling=greedy).pays


def test_one_auto_policy_speculates_where_it_pays_or_where_the_run_must():
  losing = tuning.GammaChoice(gamma=2, alpha=0.1, c=0.5, r={2: 2.0}, predicted_speedup={2: 0.6})
  paying = dataclasses.replace(losing, predicted_speedup={2: 1.5})
  assert losing.decide() is None and losing.decide(must_speculate=True) == 2
  assert paying.decide() == 2 and paying.decide(must_speculate=True) == 2
  unweighed = dataclasses.replace(paying, not_weighed="one prompt")
  assert unweighed.decide() is None


def test_auto_gamma_with_real_timing_returns_a_valid_choice():
  target, draft = pair()
  choice = tuning.tune_gamma(target, draft, PROMPTS, max_gamma=3, repeats=2)
  assert 1 <= choice.gamma <= 3 and set(choice.r) == {1, 2, 3}
  assert choice.c > 0 and all(r > 0 for r in choice.r.values())


def test_bad_gamma_values():
  target, draft = pair()
  with pytest.raises(ValueError, match='"auto"'):
    speculative_generate(target, draft, PROMPTS, gamma="fast", max_new_tokens=4)
  from specsample.decoding import SpeculativeSettings

  with pytest.raises(ValueError, match="specsample.speculative_generate"):
    SpeculativeSettings(gamma="auto", max_new_tokens=4)
  with pytest.raises(ValueError, match="gamma"):
    speculative_generate(target, draft, PROMPTS, gamma=0, max_new_tokens=4)
  assert _gamma_value("auto") == "auto" and _gamma_value("3") == 3
  for text in ("0", "x", "-2"):
    with pytest.raises(argparse.ArgumentTypeError):
      _gamma_value(text)


def test_interleaved_step_timing_times_every_step_once_per_round(monkeypatch):
  """Rounds go through all steps in turn (a slow spell hits every k alike), the first
  (compiling) run of each is not timed, and each median is per extend call."""
  target, draft = pair()
  order = []
  clock = [0.0]
  durations = {(id(target), 1): 1.0, (id(target), 3): 2.0, (id(draft), 1): 0.5}

  def fake_calls(model, state, tokens, calls):
    order.append((id(model), tokens.shape[1]))
    clock[0] += durations[id(model), tokens.shape[1]] * (100 if len(order) <= 3 else 1)
    return tokens

  monkeypatch.setattr(costs, "_extend_calls", fake_calls)
  monkeypatch.setattr(timing.time, "perf_counter", lambda: clock[0])
  prompts = jnp.array([[1, 2]], jnp.int32)
  steps = [(target, 1), (target, 3), (draft, 1)]
  seconds = costs.interleaved_step_seconds(steps, prompts, repeats=4, calls=10)
  assert seconds == pytest.approx([0.1, 0.2, 0.05])
  keys = [(id(m), k) for m, k in steps]
  assert order == keys * 5  # one untimed round, then 4 interleaved rounds
