"""The speedup model against hand-computed values of the paper's formulas."""

from __future__ import annotations

import jax.numpy as jnp
import pytest

from specsample.core import (
  best_gamma,
  expected_accepted_tokens,
  expected_tokens_per_iteration,
  mean_acceptance_probability,
  theoretical_speedup,
)


def test_expected_tokens():
  # (1 - 0.5^4) / (1 - 0.5) = 1.875 = 1 + 0.5 + 0.25 + 0.125
  assert expected_tokens_per_iteration(0.5, 3) == pytest.approx(1.875)
  assert expected_tokens_per_iteration(1.0, 3) == 4.0
  assert expected_tokens_per_iteration(0.0, 5) == 1.0
  assert expected_accepted_tokens(2 / 3, 2) == pytest.approx(10 / 9)  # the golden case


def test_speedup_formula():
  # Paper, alpha = 0.8, gamma = 5, c = 0.05: (1 - 0.8^6) / (0.2 * 1.25) = 2.95
  assert theoretical_speedup(0.8, 5, 0.05) == pytest.approx((1 - 0.8**6) / (0.2 * 1.25))
  assert theoretical_speedup(0.8, 5, 0.05) == pytest.approx(2.951424)
  # With verification costing r = 2 target steps: same numerator, denominator 0.25 + 2.
  assert theoretical_speedup(0.8, 5, 0.05, r=2.0) == pytest.approx(3.68928 / 2.25)


def test_best_gamma_is_the_argmax():
  for alpha, c, r in [(0.8, 0.05, 1.0), (0.6, 0.1, 1.0), (0.9, 0.02, 2.0), (0.3, 0.5, 1.0)]:
    speedups = {g: theoretical_speedup(alpha, g, c, r) for g in range(1, 11)}
    assert best_gamma(alpha, c, r) == max(speedups, key=speedups.get)
  assert best_gamma(0.99, 0.0, 1.0, max_gamma=7) == 7  # free drafts: draft as much as allowed
  # Measured verify costs per gamma: an expensive long verify pass moves the optimum down.
  ratios = {1: 1.2, 2: 1.3, 3: 1.4, 4: 3.0, 5: 3.2}
  expected = max(ratios, key=lambda g: theoretical_speedup(0.8, g, 0.05, ratios[g]))
  assert best_gamma(0.8, 0.05, ratios) == expected == 3
  assert best_gamma(0.8, 0.05, 1.0) > 3


def test_mean_acceptance_probability():
  p = jnp.array([[2 / 3, 1 / 3], [0.5, 0.5]])
  q = jnp.array([[1 / 3, 2 / 3], [0.5, 0.5]])
  assert float(mean_acceptance_probability(p, q)) == pytest.approx((2 / 3 + 1.0) / 2)


@pytest.mark.parametrize(
  "call",
  [
    lambda: expected_tokens_per_iteration(1.2, 3),
    lambda: expected_tokens_per_iteration(0.5, -1),
    lambda: theoretical_speedup(0.5, 3, -0.1),
    lambda: theoretical_speedup(0.5, 3, 0.1, r=0.0),
  ],
)
def test_bad_arguments(call):
  with pytest.raises(ValueError):
    call()
