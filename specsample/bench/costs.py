"""Step costs of a model on this machine: t(k) for one `extend` over k tokens.

c = t_draft(1) / t_target(1) and r(k) = t_target(k) / t_target(1) are the two numbers the
speedup model needs besides alpha (specsample.core.speedup).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from specsample.bench.timing import time_call


@functools.partial(jax.jit, static_argnames=("num_new_positions",))
def _init(model, prompts, lengths, num_new_positions):
  return model.init_state(prompts, lengths, num_new_positions)[0]


@jax.jit
def _extend_logits(model, state, tokens):
  # num_valid 0: the state does not advance, so every timed call does the same work.
  return model.extend(state, tokens, jnp.zeros((tokens.shape[0],), jnp.int32))[0]


def step_seconds(
  model, prompts: jax.Array, k: int, *, cache_length: int = 64, repeats: int = 20
) -> float:
  """Median seconds of one `extend` over k tokens per row after prefilling `prompts`."""
  lengths = jnp.sum(prompts > 0, axis=1).astype(jnp.int32)
  state = _init(model, prompts, lengths, cache_length)
  tokens = jnp.zeros((prompts.shape[0], k), jnp.int32)
  timing, _ = time_call(lambda: _extend_logits(model, state, tokens), repeats=repeats)
  return timing.median


def verify_cost_ratios(
  target, prompts: jax.Array, gammas, *, repeats: int = 20
) -> dict[int, float]:
  """{gamma: r(gamma + 1) = t(gamma + 1) / t(1)} for the target, measured side by side."""
  one = step_seconds(target, prompts, 1, repeats=repeats)
  return {g: step_seconds(target, prompts, g + 1, repeats=repeats) / one for g in gammas}


def cost_ratio(draft, target, prompts: jax.Array, *, repeats: int = 20) -> float:
  """c: one draft step over one target step, measured side by side."""
  return step_seconds(draft, prompts, 1, repeats=repeats) / step_seconds(
    target, prompts, 1, repeats=repeats
  )
