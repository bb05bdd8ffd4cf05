"""Spec-Bench by category: accepted tokens per target call and speedup over plain decoding.

Reads Spec-Bench's question set (`data/spec_bench/question.jsonl` of hemingkx/Spec-Bench;
not shipped here: its QA and RAG parts come from Natural Questions, CC BY-SA), takes the
first turn of the first `--per-category` questions of each task (MT-bench's eight
categories count as one task, `mt_bench`, as its leaderboard does), and decodes each
prompt at batch 1 speculatively and plainly with the same pair, side by side in one run
(compilation excluded, runs interleaved, medians). Prints one row per task and overall:
mean accepted tokens per target call (tau), ms/token of both decoders and their ratio.

  python scripts/compare/spec_bench.py /path/to/question.jsonl --per-category 4 \
      --max-new-tokens 128 --out docs/bench/spec_bench.json
"""

from __future__ import annotations

import argparse
import collections
import json
import pathlib
import sys

import numpy as np

from specsample.bench.pair import pad_to_width
from specsample.bench.timing import measured_speedup, seconds_per_token, time_calls
from specsample.core import SamplingConfig
from specsample.decoding import SpeculativeSettings, generate, speculative_decode
from specsample.pairs import load_pair

MT_BENCH = {
  "writing",
  "roleplay",
  "reasoning",
  "math",
  "coding",
  "extraction",
  "stem",
  "humanities",
}


def read_questions(path: str, per_category: int) -> dict[str, list[str]]:
  """{task: first turns}: the first `per_category` questions of each task, in file order."""
  tasks: dict[str, list[str]] = collections.defaultdict(list)
  for line in pathlib.Path(path).read_text(encoding="utf-8").splitlines():
    if not line.strip():
      continue
    record = json.loads(line)
    task = "mt_bench" if record["category"] in MT_BENCH else record["category"]
    if len(tasks[task]) < per_category:
      tasks[task].append(record["turns"][0])
  return dict(tasks)


def main() -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("questions", help="Spec-Bench's question.jsonl")
  parser.add_argument("--per-category", type=int, default=4)
  parser.add_argument("--max-new-tokens", type=int, default=128)
  parser.add_argument("--max-prompt-tokens", type=int, default=1024, help="longer: skipped")
  parser.add_argument("--temperature", type=float, default=0.0)
  parser.add_argument("--gamma", type=int, default=None, help="default: the pair's")
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--target", default=None)
  parser.add_argument("--draft", default=None)
  parser.add_argument("--out", default=None, help="write the results as JSON here")
  args = parser.parse_args()

  pair = load_pair(args.target, args.draft).for_padded_prompts()  # one width for all prompts
  for note in pair.notes():
    print(note, file=sys.stderr)
  gamma = args.gamma or pair.gamma
  sampling = SamplingConfig(temperature=args.temperature)
  settings = SpeculativeSettings.of(
    gamma=gamma, max_new_tokens=args.max_new_tokens, sampling=sampling
  )
  encoded = {
    task: [pair.tokenizer.apply_chat_template([{"role": "user", "content": t}]) for t in texts]
    for task, texts in read_questions(args.questions, args.per_category).items()
  }
  encoded = {
    task: [p for p in prompts if len(p) <= args.max_prompt_tokens]
    for task, prompts in encoded.items()
  }
  width = max(len(p) for prompts in encoded.values() for p in prompts)  # one program
  rows, totals = [], collections.Counter()
  print(f"{pair.title}, gamma {gamma}, T={args.temperature:g}, up to {args.max_new_tokens} "
        f"new tokens, medians of {args.repeats}", file=sys.stderr)  # fmt: skip
  for task, prompts in encoded.items():
    counts = collections.Counter()
    for index, prompt in enumerate(prompts):
      array, length = pad_to_width([prompt], width)
      (spec, plain), (spec_out, plain_out) = time_calls(
        [
          lambda a=array, n=length, i=index: speculative_decode(
            pair.target, pair.draft, a, settings, seed=i, prompt_lengths=n
          ),
          lambda a=array, n=length, i=index: generate(
            pair.target, a, prompt_lengths=n, max_new_tokens=args.max_new_tokens,
            sampling=sampling, seed=i,
          ),
        ],
        repeats=args.repeats,
      )  # fmt: skip
      counts["spec_s"] += spec.median
      counts["plain_s"] += plain.median
      counts["spec_tokens"] += int(np.sum(spec_out.lengths))
      counts["plain_tokens"] += int(np.sum(plain_out.lengths))
      counts["calls"] += int(np.sum(spec_out.stats.iterations))
      counts["prompts"] += 1
      print(f"  {task} {index + 1}/{len(prompts)}", file=sys.stderr)
    totals.update(counts)
    rows.append((task, counts))
  rows.append(("overall", totals))
  table = [
    "| task | prompts | tau (tokens/call) | plain ms/token | speculative ms/token | speedup |",
    "|---|---|---|---|---|---|",
  ]
  results = {}
  for task, c in rows:
    spec_ms = 1e3 * seconds_per_token(c["spec_s"], c["spec_tokens"])
    plain_ms = 1e3 * seconds_per_token(c["plain_s"], c["plain_tokens"])
    speedup = measured_speedup(c["plain_s"], c["plain_tokens"], c["spec_s"], c["spec_tokens"])
    tau = c["spec_tokens"] / max(1, c["calls"])
    results[task] = {
      "prompts": c["prompts"], "tau": round(tau, 3), "plain_ms_per_token": round(plain_ms, 3),
      "speculative_ms_per_token": round(spec_ms, 3), "speedup": round(speedup, 3),
    }  # fmt: skip
    table.append(
      f"| {task} | {c['prompts']} | {tau:.2f} | {plain_ms:.2f} | {spec_ms:.2f} | {speedup:.2f}x |"
    )
  print("\n".join(table))
  if args.out:
    meta = {"title": pair.title, "gamma": gamma, "temperature": args.temperature,
            "max_new_tokens": args.max_new_tokens, "per_category": args.per_category}  # fmt: skip
    pathlib.Path(args.out).write_text(json.dumps({"settings": meta, "tasks": results}, indent=1))
  return 0


if __name__ == "__main__":
  sys.exit(main())
