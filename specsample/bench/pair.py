"""Benchmark of a target/draft pair on this machine: alpha, c, r, predicted and measured
speedup over a gamma sweep, and batch scaling.

Every number is measured here, in one run: the autoregressive baseline and each
speculative setting decode the same prompts, each call is compiled once untimed and then
timed `repeats` times (medians). At batch 1 each prompt is decoded on its own (all
padded to one width so that one program serves every prompt, each prefilled only as far
as it holds tokens: models.prefill) and the seconds are summed.
A measured speedup is plain over speculative seconds per generated token
(bench.timing.measured_speedup).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from specsample.bench.costs import clear_step_programs, interleaved_step_seconds
from specsample.bench.pair_report import (
  BatchPoint,
  BenchSettings,
  PairReport,
  StepCosts,
  SweepPoint,
)
from specsample.bench.phases import phase_breakdown
from specsample.bench.roofline import (
  call_floors,
  decoder_roofline,
  has_weights_per_call,
  measure_roofs,
)
from specsample.bench.timing import time_calls
from specsample.core import SamplingConfig, theoretical_speedup
from specsample.core.contract import uses_target_features
from specsample.core.sampling import logits_to_probs
from specsample.core.speedup import expected_tokens_per_iteration
from specsample.decoding import (
  SpeculativeSettings,
  clear_compiled_programs,
  generate,
  speculative_decode,
)
from specsample.decoding.shapes import CHAIN_SHAPES, DraftShape
from specsample.models.prefill import for_padded_prompts
from specsample.models.weights import activations


def pad_to_width(prompts: Sequence[Sequence[int]], width: int) -> tuple[np.ndarray, np.ndarray]:
  """Right-pads token lists with 0 to int32[len(prompts), width]; returns (array, lengths)."""
  lengths = np.array([len(p) for p in prompts], np.int32)
  if lengths.min() < 1 or lengths.max() > width:
    raise ValueError(f"prompt lengths must be in 1..{width}, got {lengths.tolist()}")
  array = np.zeros((len(prompts), width), np.int32)
  for i, row in enumerate(prompts):
    array[i, : len(row)] = row
  return array, lengths


def alpha_along_target_outputs(
  target, draft, prompts, sequences: np.ndarray, lengths: np.ndarray, sampling: SamplingConfig
) -> float:
  """alpha = E[sum_x min(p(x), q(x))] along the target's own outputs.

  p and q come from the draft and the target fed the same committed prefix (teacher
  forcing over `sequences` int[batch, length], `lengths` valid tokens per row), after the
  same temperature / top-k / top-p; at temperature 0 this is the argmax agreement rate.
  A feature draft reads the target's features of the whole prefix here, as its first
  proposal of a block does (later proposals read its own: their alpha is lower).
  """
  padded, prompt_lengths = pad_to_width(prompts, max(len(p) for p in prompts))
  overlap = _overlap(
    target,
    draft,
    jnp.asarray(padded),
    jnp.asarray(prompt_lengths),
    jnp.asarray(sequences, jnp.int32),
    sampling=sampling,
  )  # [batch, length]
  valid = np.arange(sequences.shape[1])[None, :] < np.asarray(lengths)[:, None]
  return float(np.sum(np.asarray(overlap) * valid) / max(1, valid.sum()))


@functools.partial(jax.jit, static_argnames=("sampling",))
def _overlap(target, draft, prompts, prompt_lengths, sequences, *, sampling):
  """sum_x min(p(x), q(x)) at every position of `sequences`.  -> float32[batch, length]"""
  length = sequences.shape[1]

  full = jnp.full((prompts.shape[0],), length, jnp.int32)

  def inputs_after(pending):  # [batch, length]: the pending token, then the sequence
    return jnp.concatenate([pending[:, None], sequences[:, :-1]], axis=1)

  if not uses_target_features(draft):
    probs = []
    for model in (target, draft):
      state, pending = model.init_state(prompts, prompt_lengths, length + 1)
      logits, _ = model.extend(state, inputs_after(pending), full)  # [batch, length, vocab]
      probs.append(logits_to_probs(logits, sampling))
    return jnp.sum(jnp.minimum(*probs), axis=-1)
  # A feature draft reads the target's features of the positions before its inputs: the
  # last-but-one prompt position's, then the target's own over the sequence.
  state, pending, prompt_features = target.init_state_with_features(
    prompts, prompt_lengths, length + 1
  )
  inputs = inputs_after(pending)
  target_logits, features, _ = target.extend_with_features(state, inputs, full)
  before = jnp.maximum(prompt_lengths - 2, 0)[:, None, None]
  first = jnp.take_along_axis(prompt_features, before, axis=1)  # [batch, 1, d]
  first = jnp.where((prompt_lengths >= 2)[:, None, None], first, 0.0)
  paired = jnp.concatenate([first, features[:, :-1]], axis=1).astype(jnp.float32)
  draft_state, _ = draft.init_state(prompts, prompt_lengths, length + 1, features=prompt_features)
  draft_logits, _ = draft.extend(draft_state, inputs, full, features=paired)
  q, p = logits_to_probs(target_logits, sampling), logits_to_probs(draft_logits, sampling)
  return jnp.sum(jnp.minimum(p, q), axis=-1)


def measure_costs(target, draft, prompt: Sequence[int], max_gamma: int, repeats: int) -> StepCosts:
  """t_target(k), k = 1..max_gamma + 1, and t_draft(1) at batch 1 after `prompt`, timed
  side by side (interleaved rounds)."""
  array, lengths = pad_to_width([prompt], len(prompt))
  array, lengths = jnp.asarray(array), jnp.asarray(lengths)

  ks = range(1, max_gamma + 2)
  *verify, draft_one = interleaved_step_seconds(
    [*((target, k) for k in ks), (draft, 1)], array, prompt_lengths=lengths, repeats=repeats
  )
  return StepCosts(target_seconds=dict(zip(ks, verify, strict=True)), draft_seconds=draft_one)


def bench_pair(
  target,
  draft,
  prompts: Sequence[Sequence[int]],
  settings: BenchSettings = BenchSettings(),
  *,
  progress: Callable[[str], None] | None = None,
  sampling_draft=None,
) -> PairReport:
  """Runs the whole benchmark of a pair on token-id prompts (a few to a few dozen).

  `progress(description)` is called before each measured unit of work (for a progress
  bar: `bench_steps(settings)` units in all). `sampling_draft`: the draft at temperatures
  above 0 (default `draft`; `specsample bench` passes the bundled draft without its
  prompt lookup, as `specsample generate` samples). The step costs (c, r) are `draft`'s.
  """

  def draft_at(temperature: float):
    return draft if sampling_draft is None or temperature == 0 else sampling_draft

  prompts = [list(map(int, p)) for p in prompts]
  if not prompts:
    raise ValueError("bench_pair needs at least one prompt")
  tick = progress or (lambda _: None)
  width = max(len(p) for p in prompts)
  padded, lengths = pad_to_width(prompts, width)
  rows = [(padded[i : i + 1], lengths[i : i + 1]) for i in range(len(prompts))]
  # Each prompt goes alone, padded to the longest (one program serves them all): the models
  # prefill it in passes as far as it holds tokens, not over the whole width.
  target, draft = for_padded_prompts(target), for_padded_prompts(draft)
  if sampling_draft is not None:
    sampling_draft = for_padded_prompts(sampling_draft)

  tick("step costs")
  costs = measure_costs(target, draft, prompts[0], max(settings.gammas), settings.cost_repeats)
  with_roofs = has_weights_per_call(target) and has_weights_per_call(draft)
  roofs = measure_roofs(activations=activations(target)) if with_roofs else None

  def timed_total(decode, baseline=None) -> tuple[float, list, float, int]:
    """Sum over prompts (batch 1) of the median seconds of decode(prompt row), its
    outputs, and the summed seconds and generated tokens of baseline(prompt row) timed in
    the same interleaved rounds (0.0 and 0 without one), so that the machine's slow and
    fast spells fall on both alike."""
    total, outputs, baseline_total, baseline_tokens = 0.0, [], 0.0, 0
    for index, (array, length) in enumerate(rows):
      calls = [lambda a=array, n=length: decode(a, n)]
      if baseline is not None:
        calls.append(lambda a=array, n=length: baseline(a, n))
      # Every row has the same shape: only the first compiles (and runs once untimed).
      timings, results = time_calls(calls, repeats=settings.repeats, warmup=index == 0)
      total += timings[0].median
      if baseline is not None:
        baseline_total += timings[-1].median
        baseline_tokens += int(np.sum(results[-1].lengths))
      outputs.append(results[0])
    return total, outputs, baseline_total, baseline_tokens

  ar_seconds, ar_tokens, alphas, sweep = {}, {}, {}, []
  for temperature in settings.temperatures:
    sampling = SamplingConfig(temperature=temperature)
    tick(f"autoregressive, temperature {temperature:g}")

    def plain(array, length, sampling=sampling):
      return generate(
        target,
        array,
        prompt_lengths=length,
        max_new_tokens=settings.max_new_tokens,
        sampling=sampling,
        seed=settings.seed,
      )

    ar_seconds[temperature], outputs, _, _ = timed_total(plain)
    sequences = np.concatenate([np.asarray(o.tokens) for o in outputs])
    out_lengths = np.concatenate([np.asarray(o.lengths) for o in outputs])
    ar_tokens[temperature] = int(out_lengths.sum())
    alphas[temperature] = alpha_along_target_outputs(
      target, draft_at(temperature), prompts, sequences, out_lengths, sampling
    )
    for shape in settings.shapes:
      for gamma in settings.gammas:
        tick(f"gamma {gamma}, {shape}, temperature {temperature:g}")
        sweep.append(
          _sweep_point(
            target, draft_at(temperature), gamma, shape, sampling, settings, costs, plain,
            timed_total,
          )
        )  # fmt: skip
        # One program per setting, never run again: release its memory mappings (a long
        # sweep of a deep model would otherwise exhaust vm.max_map_count on CPU).
        clear_compiled_programs(speculative_only=True)
    clear_compiled_programs()
    clear_step_programs()

  report = PairReport(
    settings=settings,
    num_prompts=len(prompts),
    costs=costs,
    analytic_alpha=alphas,
    autoregressive_seconds=ar_seconds,
    sweep=sweep,
    batch=[],
    autoregressive_tokens=ar_tokens,
    roofs=roofs,
  )
  if roofs is not None:
    report = _with_rooflines(report, target, draft_at)
  batch, phases = [], []
  for temperature in settings.temperatures:
    gamma = report.best(temperature).gamma
    tick(f"phases, gamma {gamma}, temperature {temperature:g}")
    phases.append(
      phase_breakdown(
        target,
        draft_at(temperature),
        rows[: settings.phase_prompts],
        gamma=gamma,
        sampling=SamplingConfig(temperature=temperature),
        max_new_tokens=settings.max_new_tokens,
        repeats=settings.repeats,
        seed=settings.seed,
      )
    )
    for size in settings.batch_sizes:
      tick(f"batch {size}, gamma {gamma}, temperature {temperature:g}")
      batch.append(
        _batch_point(target, draft_at(temperature), prompts, size, gamma, temperature, settings)
      )
      clear_compiled_programs()
      clear_step_programs()
  return dataclasses.replace(report, batch=batch, phases=phases)


def bench_steps(settings: BenchSettings) -> int:
  """How many times bench_pair calls `progress` (the length of a progress bar)."""
  temperatures = len(settings.temperatures)
  sweep = len(settings.shapes) * len(settings.gammas)
  return 1 + temperatures * (1 + sweep) + temperatures * (1 + len(settings.batch_sizes))


def _sweep_point(
  target, draft, gamma, shape, sampling, settings, costs, plain, timed_total
) -> SweepPoint:
  spec_settings = SpeculativeSettings.of(
    gamma=gamma,
    max_new_tokens=settings.max_new_tokens,
    sampling=sampling,
    **DraftShape.parse(shape).options(gamma),
  )

  def speculative(array, length):
    return speculative_decode(
      target, draft, array, spec_settings, seed=settings.seed, prompt_lengths=length
    )

  seconds, outputs, ar_seconds, ar_tokens = timed_total(speculative, baseline=plain)
  accepted = sum(int(np.sum(o.stats.accepted)) for o in outputs)
  rejected = sum(int(np.sum(o.stats.rejected)) for o in outputs)
  iterations = sum(int(np.sum(o.stats.iterations)) for o in outputs)
  new_tokens = sum(int(np.sum(o.lengths)) for o in outputs)
  alpha = accepted / (accepted + rejected) if accepted + rejected else 1.0
  return SweepPoint(
    gamma=gamma,
    shape=shape,
    temperature=sampling.temperature,
    alpha=alpha,
    tokens_per_target_call=new_tokens / max(1, iterations),
    accepted_histogram=np.sum([np.asarray(o.stats.accepted_histogram) for o in outputs], 0)
    .astype(int)
    .tolist(),
    speculative_seconds=seconds,
    autoregressive_seconds=ar_seconds,
    target_calls=sum(int(o.stats.target_calls) for o in outputs),
    new_tokens=new_tokens,
    autoregressive_tokens=ar_tokens,
    **(_chain_predictions(alpha, gamma, costs) if shape in CHAIN_SHAPES else _no_predictions()),
  )


def _with_rooflines(report: PairReport, target, draft_at) -> PairReport:
  """The report with the target calls' floors (k rows) and, per temperature, the
  autoregressive decoder and the fastest chain against their floors (`draft_at(t)`: the
  draft at temperature t)."""
  roofs = report.roofs
  floors = call_floors(target, report.costs.target_seconds, roofs)
  rows = []
  for t in report.settings.temperatures:
    tokens = max(1, report.autoregressive_tokens[t])
    rows.append(
      decoder_roofline(
        "autoregressive", t, report.autoregressive_seconds[t] / tokens, target, roofs=roofs
      )
    )
    points = [p for p in report.sweep if p.temperature == t and p.shape in CHAIN_SHAPES]
    if points:
      best = max(points, key=lambda p: p.speedup)
      rows.append(
        decoder_roofline(
          f"speculative (gamma {best.gamma}, {best.shape})",
          t,
          best.speculative_seconds / max(1, best.new_tokens),
          target,
          draft_at(t),
          gamma=best.gamma,
          tokens_per_target_call=best.tokens_per_target_call,
          roofs=roofs,
        )
      )
  return dataclasses.replace(report, call_floors=floors, rooflines=rows)


def _chain_predictions(alpha: float, gamma: int, costs: StepCosts) -> dict[str, float]:
  expected = expected_tokens_per_iteration(alpha, gamma)
  return dict(
    predicted_paper=expected / (gamma * costs.c + 1.0),
    predicted_with_r=theoretical_speedup(alpha, gamma, costs.c, costs.r(gamma)),
    model_seconds_per_iteration=gamma * costs.draft_seconds + costs.target_seconds[gamma + 1],
  )


def _no_predictions() -> dict[str, float]:
  nan = float("nan")
  return dict(predicted_paper=nan, predicted_with_r=nan, model_seconds_per_iteration=nan)


def _batch_point(target, draft, prompts, size, gamma, temperature, settings) -> BatchPoint:
  """Speculative vs autoregressive decoding of `size` prompts as one batch, timed in the
  same interleaved rounds."""
  chosen = [prompts[i % len(prompts)] for i in range(size)]
  array, lengths = pad_to_width(chosen, max(len(p) for p in chosen))
  sampling = SamplingConfig(temperature=temperature)
  common = dict(
    prompt_lengths=lengths,
    max_new_tokens=settings.max_new_tokens,
    sampling=sampling,
    seed=settings.seed,
  )
  spec_settings = SpeculativeSettings.of(
    gamma=gamma, max_new_tokens=settings.max_new_tokens, sampling=sampling
  )
  (spec, plain), (out, plain_out) = time_calls(
    [
      lambda: speculative_decode(
        target, draft, array, spec_settings, seed=settings.seed, prompt_lengths=lengths
      ),
      lambda: generate(target, array, **common),
    ],
    repeats=settings.repeats,
  )
  return BatchPoint(
    batch_size=size,
    gamma=gamma,
    temperature=temperature,
    speculative_seconds=spec.median,
    autoregressive_seconds=plain.median,
    new_tokens=int(np.sum(out.lengths)),
    autoregressive_tokens=int(np.sum(plain_out.lengths)),
  )
