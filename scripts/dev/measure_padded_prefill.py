"""What prompts padded to one width cost with the prefill in passes (`Pair.for_padded_prompts`,
`specsample.models.prefill`: as `specsample bench` runs them) and in one pass over the
whole width, side by side in one run.

The README's prompt and the 38 bundled prompts, each alone at batch 1, all padded to the
longest: the target's prefill, plain decoding and the default pair's speculative decoding
(greedy, gamma 3), both ways alternated prompt by prompt, each call timed --repeats times
(medians, summed over the prompts; compilation excluded and reported). Then the longest
prompt, which fills the width: its prefill both ways (one pass is taken either way). The
speculative output must equal plain decoding's token for token.

  python scripts/dev/measure_padded_prefill.py [--repeats 3] [--max-new-tokens 64] [--shipped 38]
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import sys

import jax
import numpy as np
from measuring import MAIN_JOB  # scripts/dev, beside this script

from specsample import SamplingConfig, generate, speculative_generate
from specsample.bench import time_calls
from specsample.bench.pair import pad_to_width
from specsample.data.chat_prompts import read_jsonl
from specsample.pairs import load_pair

ROOT = pathlib.Path(__file__).resolve().parents[2]
GREEDY = SamplingConfig(temperature=0.0)


def main() -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--gamma", type=int, default=3)
  parser.add_argument("--max-new-tokens", type=int, default=64)
  parser.add_argument("--shipped", type=int, default=38, help="bundled prompts after the README's")
  args = parser.parse_args()
  one_pass = load_pair()
  ways = {"in passes": one_pass.for_padded_prompts(), "one pass": one_pass}
  shipped = read_jsonl(str(ROOT / "specsample/bundled/smollm2/prompts.jsonl"))
  texts = [MAIN_JOB] + [p.prompt for p in shipped[: args.shipped]]
  tokenizer = one_pass.tokenizer
  chats = [tokenizer.apply_chat_template([{"role": "user", "content": t}]) for t in texts]
  width = max(map(len, chats))
  rows = [pad_to_width([chat], width) for chat in chats]
  print(f"{len(rows)} prompts of {min(map(len, chats))}-{width} tokens (mean "
        f"{statistics.mean(map(len, chats)):.0f}) padded to {width}", flush=True)  # fmt: skip

  prefills = {
    way: jax.jit(lambda a, n, p=pair: p.target.init_state(a, n, args.max_new_tokens + 16))
    for way, pair in ways.items()
  }

  def plain(pair, array, lengths):
    return generate(pair.target, array, prompt_lengths=lengths,
                    max_new_tokens=args.max_new_tokens, sampling=GREEDY)  # fmt: skip

  def speculative(pair, array, lengths):
    return speculative_generate(pair.target, pair.draft, array, prompt_lengths=lengths,
                                gamma=args.gamma, max_new_tokens=args.max_new_tokens,
                                sampling=GREEDY)  # fmt: skip

  parts = {"prefill": None, "plain": plain, "speculative": speculative}
  seconds = {way: dict.fromkeys(parts, 0.0) for way in ways}
  speedups = {way: [] for way in ways}  # each prompt's plain / speculative seconds
  plain_seconds = {}
  compile_seconds = {way: dict.fromkeys(parts, 0.0) for way in ways}
  for index, row in enumerate(rows):
    for part, run in parts.items():
      calls = [
        (lambda w=way, r=row: prefills[w](*r))
        if run is None
        else (lambda p=pair, r=row, f=run: f(p, *r))
        for way, pair in ways.items()
      ]
      timings, results = time_calls(calls, repeats=args.repeats)
      for way, timing in zip(ways, timings, strict=True):
        seconds[way][part] += timing.median
        if part == "plain":
          plain_seconds[way] = timing.median
        if part == "speculative":
          speedups[way].append(plain_seconds[way] / timing.median)
        if index == 0:
          compile_seconds[way][part] = timing.compile_seconds
      if part == "plain":
        expected = np.asarray(results[0].tokens)
      if part == "speculative" and any(
        not np.array_equal(np.asarray(out.tokens), expected) for out in results
      ):
        print(f"prompt {index}: speculative output differs from plain", file=sys.stderr)
        return 1
    if (index + 1) % 10 == 0:
      print(f"{index + 1} prompts timed", flush=True)
  longest = pad_to_width([max(chats, key=len)], width)
  full, _ = time_calls([lambda w=way: prefills[w](*longest) for way in ways], repeats=9)
  print(f"\nsummed over {len(rows)} prompts, medians of {args.repeats} timings each\n")
  print("| prefill | target prefill | plain decoding | speculative | speedup | median of the "
        "prompts' speedups | the longest prompt's prefill | compiling prefill / plain / "
        "speculative |")  # fmt: skip
  print("|---|---|---|---|---|---|---|---|")
  for (way, values), timing in zip(seconds.items(), full, strict=True):
    compiled = " / ".join(f"{s:.1f}" for s in compile_seconds[way].values())
    print(f"| {way} | {values['prefill']:.2f} s | {values['plain']:.2f} s | "
          f"{values['speculative']:.2f} s | {values['plain'] / values['speculative']:.2f}x | "
          f"{statistics.median(speedups[way]):.2f}x | {1e3 * timing.median:.0f} ms | "
          f"{compiled} s |")  # fmt: skip
  return 0


if __name__ == "__main__":
  sys.exit(main())
