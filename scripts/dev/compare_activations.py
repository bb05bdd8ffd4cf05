"""Plain and speculative decoding of the default pair in each integer arithmetic, side by side.

The bundled SmolLM2 pair (`load_pair(activations=...)`: the GGUF's blocks, the feature draft
behind prompt lookup) with each --activations (default: int8, one 8-bit pass, and int8x2,
a second pass over each block's rounding error), on --num-prompts held-out chat prompts
(`data.chat_prompts.build_prompts("held_out", ..., seed=11)`, never trained or tuned on),
each alone at batch 1, greedy, all padded to one width. For every prompt the plain and the
speculative decoding of every arithmetic are timed in interleaved rounds (medians of
--repeats, compilation excluded) and summed over the prompts:

  | arithmetic | plain ms/token | speculative ms/token | speedup | tokens per target call |
  | the same ms/token relative to the first arithmetic's |

and whether each speculative output equals the plain output of its arithmetic.

  python scripts/dev/compare_activations.py [--num-prompts 8] [--gamma 2] [--repeats 3]
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from specsample import SamplingConfig, generate, speculative_generate
from specsample.bench.pair import pad_to_width
from specsample.bench.timing import time_calls
from specsample.data.chat_prompts import build_prompts
from specsample.kernels import native
from specsample.pairs import load_pair

GREEDY = SamplingConfig(temperature=0.0)


def main() -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--activations", nargs="+", default=["int8", "int8x2"])
  parser.add_argument("--num-prompts", type=int, default=8)
  parser.add_argument("--gamma", type=int, default=2)
  parser.add_argument("--max-new-tokens", type=int, default=96)
  parser.add_argument("--repeats", type=int, default=3)
  args = parser.parse_args()
  pairs = {name: load_pair(activations=name) for name in args.activations}
  tokenizer = next(iter(pairs.values())).tokenizer
  prompts = build_prompts("held_out", args.num_prompts, seed=11)
  chats = [tokenizer.apply_chat_template([{"role": "user", "content": p.prompt}]) for p in prompts]
  width = max(map(len, chats))
  seconds = {(name, kind): 0.0 for name in pairs for kind in ("plain", "speculative")}
  tokens = {name: 0 for name in pairs}
  per_call = {name: [] for name in pairs}
  exact = {name: 0 for name in pairs}
  for chat in chats:
    array, lengths = pad_to_width([chat], width)
    calls, keys = [], []
    common = dict(prompt_lengths=lengths, max_new_tokens=args.max_new_tokens, sampling=GREEDY)
    for name, pair in pairs.items():
      calls.append(lambda p=pair, a=array, c=common: generate(p.target, a, **c))
      calls.append(
        lambda p=pair, a=array, c=common: speculative_generate(
          p.target, p.draft, a, gamma=args.gamma, **c
        )
      )
      keys += [(name, "plain"), (name, "speculative")]
    timings, results = time_calls(calls, repeats=args.repeats)
    for key, timing in zip(keys, timings, strict=True):
      seconds[key] += timing.median
    for index, name in enumerate(pairs):
      plain, speculative = results[2 * index], results[2 * index + 1]
      tokens[name] += int(plain.lengths[0])
      per_call[name].append(speculative.stats.tokens_per_target_call)
      exact[name] += plain.sequences() == speculative.sequences()
  print(
    f"{len(chats)} held-out prompts padded to {width} tokens, gamma {args.gamma}, "
    f"{args.max_new_tokens} new tokens, medians of {args.repeats}; integer kernels: "
    f"{native.integer_instruction_set()}"
  )
  print("| arithmetic | plain ms/token | speculative ms/token | speedup | tokens per target call "
        "| plain / first's | speculative / first's | speculative output = plain |")  # fmt: skip
  print("|---|---|---|---|---|---|---|---|")
  first = args.activations[0]
  for name in pairs:
    plain = 1e3 * seconds[(name, "plain")] / tokens[name]
    speculative = 1e3 * seconds[(name, "speculative")] / tokens[name]
    plain_first = 1e3 * seconds[(first, "plain")] / tokens[first]
    speculative_first = 1e3 * seconds[(first, "speculative")] / tokens[first]
    print(
      f"| {name} | {plain:.2f} | {speculative:.2f} | {plain / speculative:.2f}x | "
      f"{np.mean(per_call[name]):.2f} | {plain / plain_first:.3f} | "
      f"{speculative / speculative_first:.3f} | {exact[name]} / {len(chats)} |"
    )
  return 0


if __name__ == "__main__":
  sys.exit(main())
