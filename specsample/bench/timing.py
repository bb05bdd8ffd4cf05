"""Wall-clock timing of jitted calls, with compilation measured apart from the runs.

One timer serves every measurement (`time_calls`): each call runs once untimed (it
compiles), then `repeats` rounds time every call once in turn, so that a slow or fast
spell of a shared machine lands on all of them alike. Compare ratios of calls timed in
the same rounds, not absolute times from different runs.

The measured speedup has one definition everywhere (`measured_speedup`): plain decoding's
time per generated token over speculative decoding's, both on the same prompts. Sampled
outputs of the two differ in length, so their total times do not compare; per token they
do, and the speedup always equals the ratio of the two ms/token figures reported beside it.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable, Sequence
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


def time_calls(
  calls: Sequence[Callable[[], Any]], *, repeats: int, warmup: bool = True
) -> tuple[list[Timing], list[Any]]:
  """Times each call side by side; waits for device results every time.

  Returns one Timing per call (in order) and each call's last result. `warmup=False`
  skips the untimed first call, for calls whose programs are compiled already (their
  `first_call_seconds` is then nan).
  """
  if repeats < 1:
    raise ValueError(f"repeats must be >= 1, got {repeats}")
  first, results = [], []
  for call in calls:
    if not warmup:
      first.append(float("nan"))
      results.append(None)
      continue
    start = time.perf_counter()
    results.append(jax.block_until_ready(call()))
    first.append(time.perf_counter() - start)
  runs: list[list[float]] = [[] for _ in calls]
  for _ in range(repeats):
    for index, call in enumerate(calls):
      start = time.perf_counter()
      results[index] = jax.block_until_ready(call())
      runs[index].append(time.perf_counter() - start)
  timings = [
    Timing(first_call_seconds=f, seconds=tuple(r)) for f, r in zip(first, runs, strict=True)
  ]
  return timings, results


def time_call(fn: Callable[[], Any], *, repeats: int = 5) -> tuple[Timing, Any]:
  """`time_calls` of one call: (its Timing, its last result)."""
  timings, results = time_calls([fn], repeats=repeats)
  return timings[0], results[0]


def interleaved_medians(
  calls: Sequence[Callable[[], Any]], *, repeats: int, warmup: bool = True
) -> list[float]:
  """The median seconds of each call, timed side by side (`time_calls`)."""
  return [timing.median for timing in time_calls(calls, repeats=repeats, warmup=warmup)[0]]


def seconds_per_token(seconds: float, tokens: int) -> float:
  """Time per generated token: `seconds` for `tokens` tokens (all rows, EOS included)."""
  if isinstance(tokens, bool) or int(tokens) != tokens or tokens < 1:
    raise ValueError(f"a time per token needs at least one generated token, got {tokens!r}")
  return seconds / tokens


def measured_speedup(
  plain_seconds: float, plain_tokens: int, speculative_seconds: float, speculative_tokens: int
) -> float:
  """Speedup of speculative over plain decoding of the same prompts: plain seconds per
  generated token / speculative seconds per generated token. The token counts are what
  each decode generated (all rows, EOS included); at temperature 0 they are equal and
  this is the ratio of the times."""
  speculative = seconds_per_token(speculative_seconds, speculative_tokens)
  if not speculative > 0:
    raise ValueError(f"speculative decoding took {speculative_seconds} s: no speedup to report")
  return seconds_per_token(plain_seconds, plain_tokens) / speculative
