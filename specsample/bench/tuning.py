"""Choosing gamma for a target/draft pair on this machine (`gamma="auto"`).

The speedup model (core.speedup) needs three numbers, all measured here on the caller's
prompts and batch size:
  alpha   acceptance rate, from a short speculative probe run;
  c       t_draft(1) / t_target(1): one draft step over one target step;
  r(g+1)  t_target(g + 1) / t_target(1): verifying g draft tokens over one plain step.
The chosen gamma maximises E[n + 1] / (gamma * c + r(gamma + 1)).
"""

from __future__ import annotations

import dataclasses
import functools
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from specsample.core.sampling import SamplingConfig
from specsample.core.speedup import best_gamma, theoretical_speedup
from specsample.decoding.inputs import check_positive_int, prepare_prompts

PROBE_GAMMA = 4  # gamma of the alpha probe run
PROBE_NEW_TOKENS = 32  # tokens per row of the alpha probe run (at most)


@functools.partial(jax.jit, static_argnames=("num_new_positions",))
def _init(model, prompts, lengths, num_new_positions):
  return model.init_state(prompts, lengths, num_new_positions)[0]


@functools.partial(jax.jit, static_argnames=("calls",))
def _extend_calls(model, state, tokens, calls):
  """`calls` extends in one compiled loop, as the decoding loops make them (no dispatch
  per call). num_valid 0: the state does not advance, so every call does the same work;
  each call's tokens depend on the previous logits so that XLA cannot hoist the call."""
  none = jnp.zeros((tokens.shape[0],), jnp.int32)

  def body(_, tokens):
    logits = model.extend(state, tokens, none)[0]
    return tokens + (logits[0, 0, 0] > 3e38).astype(jnp.int32)  # always + 0

  return jax.lax.fori_loop(0, calls, body, tokens)


def median_seconds(fn, *, repeats: int) -> float:
  """Median wall time of `fn()` over `repeats` runs after one untimed (compiling) call."""
  return interleaved_medians([fn], repeats=repeats)[0]


def interleaved_medians(calls: Sequence[Callable[[], Any]], *, repeats: int) -> list[float]:
  """Median wall time of each call, measured side by side: each runs once untimed (it
  compiles), then `repeats` rounds time every call once in turn, so that a slow or fast
  spell of a shared machine lands on all of them alike. Returns the medians in order."""
  for call in calls:
    jax.block_until_ready(call())
  runs = [[] for _ in calls]
  for _ in range(repeats):
    for call, timed in zip(calls, runs, strict=True):
      start = time.perf_counter()
      jax.block_until_ready(call())
      timed.append(time.perf_counter() - start)
  return [statistics.median(timed) for timed in runs]


def step_seconds(
  model,
  prompts: jax.Array,
  k: int,
  *,
  prompt_lengths: jax.Array | None = None,
  cache_length: int = 64,
  repeats: int = 20,
  calls: int = 10,
) -> float:
  """Median seconds of one `extend` over k tokens per row, after prefilling `prompts`,
  inside a compiled loop of `calls` extends (what a step costs within the decoding loops,
  without the per-call dispatch a separately called function pays).

  prompts: int[batch, prompt_length], right-padded; prompt_lengths int[batch] (default:
  the count of non-zero tokens per row, for models whose padding id is 0).
  """
  return interleaved_step_seconds(
    [(model, k)],
    prompts,
    prompt_lengths=prompt_lengths,
    cache_length=cache_length,
    repeats=repeats,
    calls=calls,
  )[0]


def interleaved_step_seconds(
  steps: Sequence[tuple[Any, int]],
  prompts: jax.Array,
  *,
  prompt_lengths: jax.Array | None = None,
  cache_length: int = 64,
  repeats: int = 20,
  calls: int = 10,
) -> list[float]:
  """`step_seconds` of several (model, k) steps, measured side by side
  (`interleaved_medians`: a slow spell of a shared machine lands on all of them alike
  instead of on one k). Returns the medians in the order of `steps`."""
  if prompt_lengths is None:
    prompt_lengths = jnp.maximum(jnp.sum(prompts > 0, axis=1), 1)
  lengths = jnp.asarray(prompt_lengths, jnp.int32)
  length = max(cache_length, max(k for _, k in steps) + 2)
  states = {}  # id(model) -> its prefilled state
  runs = []
  for model, k in steps:
    if id(model) not in states:
      states[id(model)] = _init(model, prompts, lengths, length)
    tokens = jnp.zeros((prompts.shape[0], k), jnp.int32)
    runs.append(functools.partial(_extend_calls, model, states[id(model)], tokens, calls))
  return [seconds / calls for seconds in interleaved_medians(runs, repeats=repeats)]


@dataclasses.dataclass(frozen=True)
class GammaChoice:
  """The measured inputs of the speedup model and the gamma it prefers."""

  gamma: int
  alpha: float  # measured by a probe run with gamma PROBE_GAMMA
  c: float
  r: dict[int, float]  # gamma -> t_target(gamma + 1) / t_target(1)
  predicted_speedup: dict[int, float]  # gamma -> E[n + 1] / (gamma c + r)


def tune_gamma(
  target,
  draft,
  prompts,
  *,
  sampling: SamplingConfig | None = None,
  verification="token",
  max_gamma: int = 8,
  prompt_lengths=None,
  seed=0,
  repeats: int = 10,
) -> GammaChoice:
  """Measures alpha, c and r on `prompts` (same batch size) and picks the best gamma.

  Costs one probe decode and max_gamma + 2 small compilations; call it once per pair,
  machine and batch size and pass the returned `gamma` on (`gamma="auto"` in
  `speculative_generate` calls this every time).
  """
  from specsample.decoding.speculative import speculative_generate

  max_gamma = check_positive_int("max_gamma", max_gamma)
  padded, lengths = prepare_prompts(
    prompts, prompt_lengths, vocab_size=target.vocab_size, pad_id=target.pad_id
  )
  probe = speculative_generate(
    target,
    draft,
    padded,
    prompt_lengths=lengths,
    gamma=PROBE_GAMMA,
    max_new_tokens=PROBE_NEW_TOKENS,
    sampling=sampling,
    verification=verification,
    seed=seed,
  )
  alpha = probe.stats.alpha
  if alpha != alpha:  # NaN: nothing was verified (every row ended at once)
    alpha = 0.0

  gammas = range(1, max_gamma + 1)
  one, draft_one, *verify = interleaved_step_seconds(
    [(target, 1), (draft, 1), *((target, g + 1) for g in gammas)],
    padded,
    prompt_lengths=lengths,
    repeats=repeats,
  )
  c = draft_one / one
  r = {g: seconds / one for g, seconds in zip(gammas, verify, strict=True)}
  predicted = {g: theoretical_speedup(alpha, g, c, r[g]) for g in r}
  return GammaChoice(
    gamma=best_gamma(alpha, c, r, max_gamma=max_gamma),
    alpha=alpha,
    c=c,
    r=r,
    predicted_speedup=predicted,
  )
