"""The speedup model of Leviathan et al. 2023 (section 3), with a verify-cost ratio r.

  alpha  expected acceptance probability of one draft token, E[sum_x min(p(x), q(x))]
  gamma  draft tokens per iteration
  c      time of one draft step / time of one target step
  r      time of one target pass over gamma+1 tokens / time over 1 token
         (the paper assumes r = 1: memory-bound accelerators)

Expected tokens per iteration (token-wise verification, i.i.d. acceptances):
  E[n + 1] = (1 - alpha^(gamma+1)) / (1 - alpha)
Expected walltime speedup over autoregressive decoding of the target:
  S_th = E[n + 1] / (gamma * c + r)
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import jax
import jax.numpy as jnp


def _check_alpha_gamma(alpha: float, gamma: int) -> None:
  if not 0.0 <= alpha <= 1.0:
    raise ValueError(f"alpha must be in [0, 1], got {alpha}")
  if isinstance(gamma, bool) or not isinstance(gamma, int) or gamma < 0:
    raise ValueError(f"gamma must be an int >= 0, got {gamma!r}")


def expected_tokens_per_iteration(alpha: float, gamma: int) -> float:
  """E[n + 1] = (1 - alpha^(gamma+1)) / (1 - alpha); gamma + 1 when alpha = 1."""
  _check_alpha_gamma(alpha, gamma)
  if alpha == 1.0:
    return float(gamma + 1)
  return (1.0 - alpha ** (gamma + 1)) / (1.0 - alpha)


def expected_accepted_tokens(alpha: float, gamma: int) -> float:
  """E[n]: accepted draft tokens per iteration (alpha + alpha^2 + ... + alpha^gamma)."""
  return expected_tokens_per_iteration(alpha, gamma) - 1.0


def theoretical_speedup(alpha: float, gamma: int, c: float, r: float = 1.0) -> float:
  """S_th = E[n + 1] / (gamma * c + r); the paper's formula is r = 1."""
  if not (c >= 0 and math.isfinite(c)):
    raise ValueError(f"c must be a finite number >= 0, got {c}")
  if not (r > 0 and math.isfinite(r)):
    raise ValueError(f"r must be a finite number > 0, got {r}")
  return expected_tokens_per_iteration(alpha, gamma) / (gamma * c + r)


def best_gamma(
  alpha: float, c: float, r: float | Mapping[int, float] = 1.0, max_gamma: int = 10
) -> int:
  """The gamma in 1..max_gamma with the largest S_th (ties go to the smaller gamma).

  r is one verify-cost ratio for every gamma, or a mapping gamma -> r(gamma + 1) as
  measured (on CPUs verifying more tokens costs more); gammas missing from it are skipped.
  """
  gammas = [g for g in range(1, max_gamma + 1) if not isinstance(r, Mapping) or g in r]
  if not gammas:
    raise ValueError("no gamma in 1..max_gamma has a verify-cost ratio")

  def speedup(g: int) -> float:
    return theoretical_speedup(alpha, g, c, r[g] if isinstance(r, Mapping) else r)

  return max(gammas, key=lambda g: (speedup(g), -g))


def acceptance_probability(draft_probs: jax.Array, target_probs: jax.Array) -> jax.Array:
  """beta = sum_x min(p(x), q(x)) per position.  [..., vocab] x2 -> [...]."""
  return jnp.sum(jnp.minimum(draft_probs, target_probs), axis=-1)


def mean_acceptance_probability(draft_probs: jax.Array, target_probs: jax.Array) -> jax.Array:
  """alpha = E[beta], averaged over every leading position.  [..., vocab] x2 -> scalar."""
  return jnp.mean(acceptance_probability(draft_probs, target_probs))
