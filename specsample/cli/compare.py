"""Speculative vs autoregressive decoding of the same target, timed side by side.

Used by `specsample translate` and `specsample generate`: both decoders run on the same
prompts in the same process; each is called once to compile (reported separately), then
`repeats` rounds time each once in turn (bench.timing.time_calls: a slow spell of a
shared machine lands on both); the medians give the measured speedup.

Streaming (`on_tokens`) applies to the decode whose output is printed (speculative, or
plain when speculation is off): its first call hands the tokens to `on_tokens` as they
are accepted, and its timed runs run the same streaming program with the tokens dropped,
so the times include the per-iteration host callback but not what the sink does with
the tokens (printing happens in the first call, compilation included, which is not
timed). The baseline never streams.
"""

from __future__ import annotations

import dataclasses

from specsample.bench import time_calls
from specsample.decoding import GenerationOutput, SpeculativeSettings, generate, speculative_decode
from specsample.decoding.streaming import OnTokens


@dataclasses.dataclass(frozen=True)
class Comparison:
  speculative: GenerationOutput
  autoregressive: GenerationOutput | None
  speculative_seconds: float  # median of the timed runs
  autoregressive_seconds: float | None
  speculative_compile_seconds: float
  autoregressive_compile_seconds: float | None

  @property
  def speedup(self) -> float | None:
    if self.autoregressive_seconds is None:
      return None
    return self.autoregressive_seconds / self.speculative_seconds

  @property
  def identical(self) -> bool | None:
    """Whether both produced the same tokens (expected under greedy decoding)."""
    if self.autoregressive is None:
      return None
    return self.speculative.sequences() == self.autoregressive.sequences()

  def ms_per_token(self, which: str) -> float:
    output = self.speculative if which == "speculative" else self.autoregressive
    seconds = self.speculative_seconds if which == "speculative" else self.autoregressive_seconds
    return 1e3 * seconds / max(1, sum(map(len, output.sequences())))


def compare(
  target,
  draft,
  prompts,
  settings: SpeculativeSettings,
  *,
  speculate: bool = True,
  seed: int = 0,
  repeats: int = 3,
  baseline: bool = True,
  prompt_lengths=None,
  on_tokens: OnTokens | None = None,
) -> Comparison:
  """Decodes `prompts` speculatively and (if `baseline`) autoregressively, timing both.
  speculate False: plain decoding only (`settings` give its length and sampling).
  `on_tokens`: the first call of the printed decode streams its tokens to it."""
  sinks = iter([on_tokens] if on_tokens is not None else [])

  def streamed():  # the first call's sink, then one that drops the tokens
    return next(sinks, _drop) if on_tokens is not None else None

  def speculative():
    return speculative_decode(
      target, draft, prompts, settings, seed=seed, prompt_lengths=prompt_lengths,
      on_tokens=streamed(),
    )  # fmt: skip

  def autoregressive():
    return generate(
      target,
      prompts,
      prompt_lengths=prompt_lengths,
      max_new_tokens=settings.max_new_tokens,
      sampling=settings.sampling,
      seed=seed,
    )

  if not speculate:

    def plain():
      return generate(
        target, prompts, prompt_lengths=prompt_lengths, max_new_tokens=settings.max_new_tokens,
        sampling=settings.sampling, seed=seed, on_tokens=streamed(),
      )  # fmt: skip

    (timing,), (out,) = time_calls([plain], repeats=repeats)
    return Comparison(
      speculative=out, autoregressive=None, speculative_seconds=timing.median,
      autoregressive_seconds=None, speculative_compile_seconds=timing.compile_seconds,
      autoregressive_compile_seconds=None,
    )  # fmt: skip
  calls = [speculative, autoregressive] if baseline else [speculative]
  timings, outputs = time_calls(calls, repeats=repeats)
  spec_timing, spec_out = timings[0], outputs[0]
  ar_timing, ar_out = (timings[1], outputs[1]) if baseline else (None, None)
  return Comparison(
    speculative=spec_out,
    autoregressive=ar_out,
    speculative_seconds=spec_timing.median,
    autoregressive_seconds=ar_timing.median if ar_timing else None,
    speculative_compile_seconds=spec_timing.compile_seconds,
    autoregressive_compile_seconds=ar_timing.compile_seconds if ar_timing else None,
  )


def _drop(row: int, tokens: list[int]) -> None:
  """A sink that drops the tokens (the timed runs of a streaming decode)."""


def summary_line(comparison: Comparison) -> str:
  stats = comparison.speculative.stats
  if stats.gamma == 0:  # decoded plainly
    return (
      f"plain decoding | {comparison.ms_per_token('speculative'):.1f} ms/token | "
      f"compilation {comparison.speculative_compile_seconds:.1f} s (excluded)"
    )
  parts = [
    f"alpha {stats.alpha:.2f}",
    f"tokens per target call {stats.tokens_per_target_call:.2f}",
  ]
  if comparison.speedup is not None:
    parts.append(
      f"speedup {comparison.speedup:.2f}x over autoregressive "
      f"({comparison.ms_per_token('autoregressive'):.1f} -> "
      f"{comparison.ms_per_token('speculative'):.1f} ms/token)"
    )
    parts.append(
      f"compilation {comparison.speculative_compile_seconds:.1f} s + "
      f"{comparison.autoregressive_compile_seconds:.1f} s (excluded)"
    )
  else:
    parts.append(f"compilation {comparison.speculative_compile_seconds:.1f} s (excluded)")
  return " | ".join(parts)
