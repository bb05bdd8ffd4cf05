"""Step costs of a model on this machine: t(k) for one `extend` over k tokens.

c = t_draft(1) / t_target(1) and r(k) = t_target(k) / t_target(1) are the two numbers the
speedup model needs besides alpha (specsample.core.speedup); `gamma="auto"`
(bench.tuning) and `specsample bench` both take them from here. A step is timed inside a
compiled loop of several calls, as the decoding loops make them (no dispatch per call).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp

from specsample.bench.timing import interleaved_medians


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


def clear_step_programs() -> None:
  """Drops the compiled step-timing programs (see decoding.clear_compiled_programs)."""
  _init.clear_cache()
  _extend_calls.clear_cache()


def verify_cost_ratios(
  target, prompts: jax.Array, gammas, *, repeats: int = 20
) -> dict[int, float]:
  """{gamma: r(gamma + 1) = t(gamma + 1) / t(1)} for the target, measured side by side."""
  gammas = list(gammas)
  one, *verify = interleaved_step_seconds(
    [(target, 1), *((target, g + 1) for g in gammas)], prompts, repeats=repeats
  )
  return {g: seconds / one for g, seconds in zip(gammas, verify, strict=True)}


def cost_ratio(draft, target, prompts: jax.Array, *, repeats: int = 20) -> float:
  """c: one draft step over one target step, measured side by side."""
  draft_one, target_one = interleaved_step_seconds(
    [(draft, 1), (target, 1)], prompts, repeats=repeats
  )
  return draft_one / target_one
