"""Measuring specsample: timing that excludes compilation, and exactness checks."""

from specsample.bench.costs import cost_ratio, step_seconds, verify_cost_ratios
from specsample.bench.exactness import SequenceFit, sequence_fit
from specsample.bench.timing import Timing, interleaved_medians, time_call, time_calls
from specsample.bench.tuning import GammaChoice, tune_gamma

__all__ = [
  "GammaChoice",
  "SequenceFit",
  "Timing",
  "cost_ratio",
  "sequence_fit",
  "step_seconds",
  "interleaved_medians",
  "time_call",
  "time_calls",
  "tune_gamma",
  "verify_cost_ratios",
]
