"""What several scripts/dev measurements share (imported from beside them): a bundled GGUF
target loaded, or the package to install named; and the median time per call of programs
that each loop over several calls."""

from __future__ import annotations

import sys

from specsample.bench import time_calls
from specsample.checkpoints import load_model

# The README's main job (`specsample generate`'s example).
MAIN_JOB = (
  "Fix the spelling and grammar mistakes in this paragraph and return the corrected "
  "paragraph: 'Speculative decoding are a technique that make large language models faster. "
  "A small draft model guess several tokens ahead, and the large model check all of them in "
  "one pass. When the guesses is right, many tokens is produced for the price of one step.'"
)


def gguf_target(path, package: str, activations: str = "int8"):
  """The GGUF model at `path` with its blocks kept, in `activations` arithmetic; when
  `path` is None (not installed), the pip command for `package` on stderr and exit 2."""
  if path is None:
    print(f"pip install {package}", file=sys.stderr)
    raise SystemExit(2)
  return load_model(path, gguf_blocks=True, activations=activations)


def ms_per_call(programs, names, repeats: int, calls: int) -> dict:
  """{name: ms per call} of each program (`bench.time_calls`: interleaved, the median of
  `repeats`), each program running `calls` calls."""
  timings, _ = time_calls(programs, repeats=repeats)
  return {name: 1e3 * t.median / calls for name, t in zip(names, timings, strict=True)}
