"""The default pair's fixed chain against adaptive draft length, with plain decoding in the
same rounds, on held-out chat prompts.

The bundled SmolLM2 pair as `load_pair()` gives it (the GGUF's blocks, 8-bit activations,
the feature draft behind prompt lookup), greedy, on --num-prompts held-out chat prompts
(`data.chat_prompts.build_prompts("held_out", ..., seed=11)`: never trained or tuned on),
each alone at batch 1, all padded to one width so that one program serves each decoder.
Per prompt and decoder: the best of --repeats timed runs (compilation excluded), its
speedup over plain decoding's and its tokens per target call; every output is checked
against plain greedy decoding's. Then the median and the total time of each decoder.

  python scripts/dev/compare_adaptive_length.py [--num-prompts 10] [--gamma 3] \
      [--adaptive-gamma 3 5] [--threshold 0.4]
"""

from __future__ import annotations

import argparse
import sys
import time

import jax
import numpy as np

from specsample import SamplingConfig, generate, speculative_generate
from specsample.bench.pair import pad_to_width
from specsample.data.chat_prompts import build_prompts
from specsample.decoding.adaptive import AdaptiveDraft
from specsample.pairs import load_pair

GREEDY = SamplingConfig(temperature=0.0)


def best_of(repeats: int, decode, *args, **options):
  """(output, the best of `repeats` timed calls' seconds), after one untimed call (which
  compiles, once per decoder, and warms)."""
  out = decode(*args, **options)
  best = float("inf")
  for _ in range(repeats):
    start = time.perf_counter()
    out = decode(*args, **options)
    jax.block_until_ready(out.tokens)
    best = min(best, time.perf_counter() - start)
  return out, best


def main() -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--num-prompts", type=int, default=10)
  parser.add_argument("--gamma", type=int, default=3, help="the fixed chain's")
  parser.add_argument("--adaptive-gamma", type=int, nargs="+", default=[3, 5])
  parser.add_argument("--threshold", type=float, default=AdaptiveDraft().threshold)
  parser.add_argument("--max-new-tokens", type=int, default=128)
  parser.add_argument("--repeats", type=int, default=2)
  args = parser.parse_args()
  pair = load_pair()
  prompts = build_prompts("held_out", args.num_prompts, seed=11)
  chats = [
    pair.tokenizer.apply_chat_template([{"role": "user", "content": p.prompt}]) for p in prompts
  ]
  width = max(map(len, chats))
  adaptive = AdaptiveDraft(threshold=args.threshold)
  decoders = {f"chain, gamma {args.gamma}": dict(gamma=args.gamma)}
  for gamma in args.adaptive_gamma:
    decoders[f"adaptive, gamma {gamma}"] = dict(gamma=gamma, adaptive=adaptive)
  seconds = {name: [] for name in ["plain", *decoders]}
  per_call = {name: [] for name in decoders}
  for prompt, chat in zip(prompts, chats, strict=True):
    array, lengths = pad_to_width([chat], width)
    common = dict(prompt_lengths=lengths, max_new_tokens=args.max_new_tokens, sampling=GREEDY)
    plain, plain_seconds = best_of(args.repeats, generate, pair.target, array, **common)
    seconds["plain"].append(plain_seconds)
    line = f"{prompt.task:14s} plain {1e3 * plain_seconds / int(plain.lengths[0]):5.2f} ms/token"
    for name, options in decoders.items():
      out, spec_seconds = best_of(
        args.repeats, speculative_generate, pair.target, pair.draft, array, **common, **options
      )
      if out.sequences() != plain.sequences():
        raise SystemExit(f"{name}: the output differs from plain greedy decoding's")
      seconds[name].append(spec_seconds)
      per_call[name].append(out.stats.tokens_per_target_call)
      line += f" | {name} {plain_seconds / spec_seconds:4.2f}x {per_call[name][-1]:4.2f} t/c"
    print(line, flush=True)
  plain_total = sum(seconds["plain"])
  print(
    f"{len(prompts)} held-out prompts padded to {width} tokens, {args.max_new_tokens} new tokens:"
  )
  for name in decoders:
    speedups = np.asarray(seconds["plain"]) / np.asarray(seconds[name])
    print(
      f"  {name}: median {np.median(speedups):.2f}x, "
      f"total {plain_total / sum(seconds[name]):.2f}x, "
      f"{np.mean(per_call[name]):.2f} tokens per target call"
    )
  return 0


if __name__ == "__main__":
  sys.exit(main())
