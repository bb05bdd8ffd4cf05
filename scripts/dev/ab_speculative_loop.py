"""A/B timing of two versions of the speculative loop, side by side in one run.

Loads another version of `specsample/decoding/speculative.py` (for instance from git) as
module "before" and times its `speculative_generate` against this checkout's on the
bundled pair's test prompts (batch 1, each prompt alone, compilation excluded, runs
interleaved, medians), next to plain `generate`. Greedy outputs must agree token for
token between the two versions and with `generate`.

  git show eca9d94:specsample/decoding/speculative.py > /tmp/speculative_before.py
  python scripts/dev/ab_speculative_loop.py /tmp/speculative_before.py --gamma 1 3 6
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time

import jax
import numpy as np

from specsample import SamplingConfig, bundled, generate, speculative_generate
from specsample.bench.pair import pad_to_width
from specsample.pairs import load_pair


def load_module(path: str):
  spec = importlib.util.spec_from_file_location("speculative_before", path)
  module = importlib.util.module_from_spec(spec)
  sys.modules[spec.name] = module  # dataclasses look their module up there
  spec.loader.exec_module(module)
  return module


def main() -> None:
  # Flags alike in shape to measure_loop_overhead.py's: each script reads its own.
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("before", help="path of the other speculative.py")
  parser.add_argument("--gamma", type=int, nargs="+", default=[1, 3, 6])
  parser.add_argument("--temperature", type=float, nargs="+", default=[0.0, 1.0])
  parser.add_argument("--num-prompts", type=int, default=8)
  parser.add_argument("--max-new-tokens", type=int, default=48)
  parser.add_argument("--repeats", type=int, default=7)
  args = parser.parse_args()
  before = load_module(args.before).speculative_generate
  pair = load_pair("bundled:ende")
  target, draft, vocab = pair.target, pair.draft, pair.tokenizer
  lines = (bundled.pair_dir() / "test.tsv").read_text().splitlines()[: args.num_prompts]
  prompts = [vocab.encode(pair.prefix + line.split("\t")[0]) + [1] for line in lines]
  padded, lengths = pad_to_width(prompts, max(len(p) for p in prompts))
  rows = [(padded[i : i + 1], lengths[i : i + 1]) for i in range(len(prompts))]
  print(
    f"jax {jax.__version__}, {len(rows)} prompts at batch 1, up to {args.max_new_tokens} new "
    f"tokens, medians of {args.repeats} interleaved runs, seconds summed over prompts"
  )
  print("| T | gamma | autoregressive s | before s | after s | S before | S after | after/before |")
  print("|---|---|---|---|---|---|---|---|")
  for temperature in args.temperature:
    sampling = SamplingConfig(temperature=temperature)
    for gamma in args.gamma:
      totals = {"ar": 0.0, "before": 0.0, "after": 0.0}
      for array, length in rows:
        common = dict(
          prompt_lengths=length, max_new_tokens=args.max_new_tokens, sampling=sampling, gamma=gamma
        )
        calls = {
          "ar": lambda c=common, a=array: generate(
            target, a, **{k: v for k, v in c.items() if k != "gamma"}
          ),
          "before": lambda c=common, a=array: before(target, draft, a, **c),
          "after": lambda c=common, a=array: speculative_generate(target, draft, a, **c),
        }
        outputs = {name: jax.block_until_ready(fn()) for name, fn in calls.items()}
        if temperature == 0:
          for name in ("before", "after"):
            if not np.array_equal(outputs[name].tokens, outputs["ar"].tokens):
              raise SystemExit(f"greedy outputs differ: {name} vs generate")
        runs = {name: [] for name in calls}
        for _ in range(args.repeats):
          for name, fn in calls.items():
            start = time.perf_counter()
            jax.block_until_ready(fn())
            runs[name].append(time.perf_counter() - start)
        for name in calls:
          totals[name] += statistics.median(runs[name])
      ar, old, new = totals["ar"], totals["before"], totals["after"]
      print(
        f"| {temperature:g} | {gamma} | {ar:.3f} | {old:.3f} | {new:.3f} | {ar / old:.2f}x | "
        f"{ar / new:.2f}x | {new / old:.2f} |",
        flush=True,
      )


if __name__ == "__main__":
  main()
