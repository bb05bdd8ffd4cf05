"""Wall-clock timing of jitted calls, with compilation measured apart from the runs."""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable
from typing import Any

import jax


@dataclasses.dataclass(frozen=True)
class Timing:
  first_call_seconds: float  # compilation + one run
  seconds: tuple[float, ...]  # the timed runs, after the first call

  @property
  def median(self) -> float:
    return statistics.median(self.seconds)

  @property
  def compile_seconds(self) -> float:
    """Estimated compilation time: the first call minus a typical run."""
    return max(0.0, self.first_call_seconds - self.median)


def time_call(fn: Callable[[], Any], *, repeats: int = 5) -> tuple[Timing, Any]:
  """Calls fn once to compile, then `repeats` times; waits for device results each time.

  Returns the timing and the last result.
  """
  if repeats < 1:
    raise ValueError(f"repeats must be >= 1, got {repeats}")
  start = time.perf_counter()
  result = jax.block_until_ready(fn())
  first = time.perf_counter() - start
  runs = []
  for _ in range(repeats):
    start = time.perf_counter()
    result = jax.block_until_ready(fn())
    runs.append(time.perf_counter() - start)
  return Timing(first_call_seconds=first, seconds=tuple(runs)), result
