"""Tokens per target call of the SmolLM2 pair's draft behind prompt lookup, by `doubt`.

`LookupThenModel` proposes the lookup's continuation where the last 2+ tokens occurred
earlier, and where only the last token did when the draft model's top probability is
below `doubt` (0: never). This counts, for each doubt value, the kept tokens per target
call of greedy speculative decoding (gamma --gamma, up to --max-new-tokens per prompt) on
three prompt sets: `held_out` (chat prompts of the training pipeline's held-out split,
`build_prompts("held_out", N, seed=11)`: what the default was chosen on), `shipped` (the
38 bench prompts) and `main` (the README's prompt). No timing: tokens per call do not
depend on the machine (greedy rows decode as at batch 1).

  python scripts/dev/measure_lookup_doubt.py [--doubts 0 0.1 0.25 0.5 1] \
      [--sets held_out shipped main] [--held-out 24] [--draft DIR]
"""

from __future__ import annotations

import argparse
import pathlib

from measuring import MAIN_JOB  # scripts/dev, beside this script

from specsample import SamplingConfig, load_pair, speculative_generate
from specsample.data.chat_prompts import build_prompts, read_jsonl
from specsample.models.lookup_draft import LookupThenModel

ROOT = pathlib.Path(__file__).resolve().parents[2]


def prompt_sets(names: list[str], held_out: int) -> dict[str, list[str]]:
  sets = {
    "held_out": lambda: [p.prompt for p in build_prompts("held_out", held_out, seed=11)],
    "shipped": lambda: [
      p.prompt for p in read_jsonl(str(ROOT / "specsample/bundled/smollm2/prompts.jsonl"))
    ],
    "main": lambda: [MAIN_JOB],
  }
  return {name: sets[name]() for name in names}


def main() -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--doubts", type=float, nargs="+", default=[0.0, 0.1, 0.25, 0.5, 1.0])
  parser.add_argument(
    "--sets", nargs="+", choices=["held_out", "shipped", "main"],
    default=["held_out", "shipped", "main"],
  )  # fmt: skip
  parser.add_argument("--held-out", type=int, default=24, help="held-out prompts")
  parser.add_argument("--gamma", type=int, default=3)
  parser.add_argument("--max-new-tokens", type=int, default=128)
  parser.add_argument("--draft", default=None, help="a feature draft directory (default: bundled)")
  args = parser.parse_args()
  pair = load_pair(draft=args.draft, prompt_lookup=False)
  greedy = SamplingConfig(temperature=0.0)
  print(f"{pair.title}, gamma {args.gamma}, greedy, up to {args.max_new_tokens} new tokens")
  print("| prompts | " + " | ".join(f"doubt {d:g}" for d in args.doubts) + " |")
  print("|---|" + "---|" * len(args.doubts))
  for name, prompts in prompt_sets(args.sets, args.held_out).items():
    ids = [pair.tokenizer.apply_chat_template([{"role": "user", "content": p}]) for p in prompts]
    cells = []
    for doubt in args.doubts:
      draft = LookupThenModel.for_target(pair.draft, pair.target, doubt=doubt)
      output = speculative_generate(
        pair.target, draft, ids, gamma=args.gamma, max_new_tokens=args.max_new_tokens,
        sampling=greedy,
      )  # fmt: skip
      cells.append(f"{output.stats.tokens_per_target_call:.3f}")
    print(f"| {name} ({len(prompts)}) | " + " | ".join(cells) + " |", flush=True)
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
