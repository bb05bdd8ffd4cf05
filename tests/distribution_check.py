"""Goodness of fit of sampled sequences against an exactly computed distribution."""

from __future__ import annotations

import collections
import dataclasses

import numpy as np
from scipy import stats

from specsample.bench import sequence_fit

# The significance level of every distribution test in this suite. With fixed seeds the
# outcome is deterministic; a correct sampler passes at this level, a wrong one (see
# test_lossless.py's broken rules) lands at p-values below 1e-6.
SIGNIFICANCE = 1e-4


@dataclasses.dataclass(frozen=True)
class Fit:
  p_value: float  # Pearson chi-square, outcomes with expected count < 5 pooled
  total_variation: float  # 0.5 * sum |empirical - exact|
  noise_total_variation: float  # E[TV] of an exact sampler with this many samples (approx.)
  impossible: int  # samples the exact distribution gives probability 0

  @property
  def ok(self) -> bool:
    """Chi-square at level SIGNIFICANCE, and TV within 1.5x what sampling noise explains."""
    return (
      self.impossible == 0
      and self.p_value >= SIGNIFICANCE
      and self.total_variation <= 1.5 * self.noise_total_variation
    )


def fit(samples: np.ndarray, exact: dict[tuple[int, ...], float], min_expected: float = 5.0) -> Fit:
  """samples: int[num_samples, length]; exact: outcome -> probability (summing to 1)."""
  num = len(samples)
  counts = collections.Counter(map(tuple, np.asarray(samples).tolist()))
  impossible = sum(count for outcome, count in counts.items() if outcome not in exact)
  outcomes = sorted(exact, key=exact.get, reverse=True)
  expected = np.array([exact[o] * num for o in outcomes])
  observed = np.array([counts.get(o, 0) for o in outcomes], dtype=np.float64)
  big = expected >= min_expected
  f_exp, f_obs = list(expected[big]), list(observed[big])
  if (~big).any():
    f_exp.append(expected[~big].sum())
    f_obs.append(observed[~big].sum())
  f_obs[-1] += impossible  # keep totals equal; impossible samples fail on their own anyway
  f_exp[-1] += num - sum(f_exp)  # rounding of the exact probabilities
  p_value = float(stats.chisquare(f_obs, f_exp).pvalue) if len(f_exp) > 1 else 1.0
  distance = sequence_fit(samples, exact)
  return Fit(
    p_value=p_value,
    total_variation=distance.total_variation,
    noise_total_variation=distance.noise_total_variation,
    impossible=impossible,
  )
