"""Two feature drafts of the default SmolLM2 target, timed side by side in one run.

Each draft runs behind prompt lookup (the default), greedy, at one gamma, on the README's
prompt and the first --shipped of the 38 bundled prompts, each prompt alone at batch 1,
all padded to one width so that one program per decoder serves them (compilation
excluded). Every round times plain decoding and each draft's speculative decoding of
every prompt, in turn; the medians of --rounds rounds are summed over the prompts. Both
drafts' outputs must equal plain decoding's token for token.

  python scripts/dev/compare_drafts_timed.py bundled:feature /tmp/bundle/feature_draft \
      [--shipped 12] [--rounds 5] [--gamma 3] [--max-new-tokens 128]
"""

from __future__ import annotations

import argparse
import pathlib
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
  parser.add_argument("drafts", nargs=2, help="two feature drafts: directories or bundled:NAME")
  parser.add_argument("--shipped", type=int, default=12, help="bundled prompts after the README's")
  parser.add_argument("--rounds", type=int, default=5)
  parser.add_argument("--gamma", type=int, default=3)
  parser.add_argument("--max-new-tokens", type=int, default=128)
  args = parser.parse_args()
  pairs = [load_pair(draft=d).for_padded_prompts() for d in args.drafts]  # one width
  shipped = read_jsonl(str(ROOT / "specsample/bundled/smollm2/prompts.jsonl"))
  texts = [MAIN_JOB] + [p.prompt for p in shipped[: args.shipped]]
  tokenizer = pairs[0].tokenizer
  chats = [tokenizer.apply_chat_template([{"role": "user", "content": t}]) for t in texts]
  width = max(map(len, chats))
  rows = [pad_to_width([chat], width) for chat in chats]
  plain_target = pairs[0].target

  def plain(array, lengths):
    return generate(plain_target, array, prompt_lengths=lengths,
                    max_new_tokens=args.max_new_tokens, sampling=GREEDY)  # fmt: skip

  def speculative(pair, array, lengths):
    return speculative_generate(
      pair.target, pair.draft, array, prompt_lengths=lengths, gamma=args.gamma,
      max_new_tokens=args.max_new_tokens, sampling=GREEDY,
    )  # fmt: skip

  names = ["plain", *args.drafts]
  total = dict.fromkeys(names, 0.0)
  tokens = dict.fromkeys(names, 0)
  calls = dict.fromkeys(args.drafts, 0)
  for i, (array, lengths) in enumerate(rows):
    runs = [lambda a=array, n=lengths: plain(a, n)]
    runs += [lambda p=pair, a=array, n=lengths: speculative(p, a, n) for pair in pairs]
    # an untimed first call each (compiling for the first prompt), then alternated rounds
    timings, results = time_calls(runs, repeats=args.rounds)
    outputs = dict(zip(names, results, strict=True))
    expected = np.asarray(outputs["plain"].tokens)
    for name in args.drafts:
      if not np.array_equal(np.asarray(outputs[name].tokens), expected):
        print(f"prompt {i}: {name}'s output differs from plain decoding's", file=sys.stderr)
        return 1
      calls[name] += int(outputs[name].stats.target_calls)
    for name, timing in zip(names, timings, strict=True):
      total[name] += timing.median
      tokens[name] += int(outputs[name].lengths[0])
  print(f"{len(rows)} prompts (the README's and {len(rows) - 1} bundled) padded to {width} "
        f"tokens, greedy, gamma {args.gamma}, up to {args.max_new_tokens} new tokens, "
        f"medians of {args.rounds} alternated rounds; {jax.devices()[0].device_kind}")  # fmt: skip
  print("| decoder | ms/token | tokens per target call | speedup over plain |")
  print("|---|---|---|---|")
  plain_ms = 1e3 * total["plain"] / tokens["plain"]
  for name in names:
    ms = 1e3 * total[name] / tokens[name]
    per_call = f"{tokens[name] / calls[name]:.3f}" if name in calls else ""
    print(f"| {name} | {ms:.2f} | {per_call} | {plain_ms / ms:.3f}x |")
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
