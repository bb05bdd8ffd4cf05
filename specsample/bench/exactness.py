"""How far sampled sequences are from an exactly known distribution."""

from __future__ import annotations

import collections
import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True)
class SequenceFit:
  total_variation: float  # 0.5 * sum_s |empirical(s) - exact(s)|
  noise_total_variation: float  # what an exact sampler of this many samples shows (approx.)
  num_samples: int


def sequence_fit(samples: np.ndarray, exact: dict[tuple[int, ...], float]) -> SequenceFit:
  """Compares whole sampled sequences int[num_samples, length] with `exact` (outcome -> p).

  The noise level uses E|X/N - p| ~ sqrt(2 p (1 - p) / (pi N)) for binomial counts, so a
  correct sampler shows total_variation close to noise_total_variation.
  """
  samples = np.asarray(samples)
  num = len(samples)
  if num == 0:
    raise ValueError("no samples")
  counts = collections.Counter(map(tuple, samples.tolist()))
  outcomes = set(exact) | set(counts)
  tv = 0.5 * sum(abs(counts.get(o, 0) / num - exact.get(o, 0.0)) for o in outcomes)
  probs = np.array(list(exact.values()))
  noise = 0.5 * np.sqrt(2 * probs * (1 - probs) / (np.pi * num)).sum()
  return SequenceFit(total_variation=float(tv), noise_total_variation=float(noise), num_samples=num)
