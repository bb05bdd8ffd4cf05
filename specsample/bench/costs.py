"""Step costs of a model on this machine: t(k) for one `extend` over k tokens.

c = t_draft(1) / t_target(1) and r(k) = t_target(k) / t_target(1) are the two numbers the
speedup model needs besides alpha (specsample.core.speedup). The timing itself lives in
specsample.decoding.tuning, which `gamma="auto"` uses too.
"""

from __future__ import annotations

import jax

from specsample.decoding.tuning import step_seconds


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
