"""Measuring specsample: timing that excludes compilation, and exactness checks."""

from specsample.bench.costs import cost_ratio, verify_cost_ratios
from specsample.bench.exactness import SequenceFit, sequence_fit
from specsample.bench.timing import Timing, time_call
from specsample.decoding.tuning import step_seconds

__all__ = [
  "SequenceFit",
  "Timing",
  "cost_ratio",
  "sequence_fit",
  "step_seconds",
  "time_call",
  "verify_cost_ratios",
]
