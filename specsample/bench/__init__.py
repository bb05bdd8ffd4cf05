"""Measuring specsample: timing that excludes compilation, and exactness checks."""

from specsample.bench.exactness import SequenceFit, sequence_fit
from specsample.bench.timing import Timing, time_call

__all__ = ["SequenceFit", "Timing", "sequence_fit", "time_call"]
