"""Step costs of a model on this machine: t(k) for one `extend` over k tokens.

c = t_draft(1) / t_target(1) and r(k) = t_target(k) / t_target(1) are the two numbers the
speedup model needs besides alpha (specsample.core.speedup). The timing itself lives in
specsample.decoding.tuning, which `gamma="auto"` uses too.
"""

from __future__ import annotations

import jax

from specsample.decoding.tuning import interleaved_step_seconds


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
