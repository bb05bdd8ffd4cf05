"""Writes user turns with SmolLM2-135M-Instruct itself (its chat template up to the user's
message, an opener of a task, sampled until the turn ends) into a committed turn
directory, for a time budget; run it again to go on. The turns become the prompts of a
response store (`generate_on_policy.py --prompts-from`). specsample.train.user_turns.

  python scripts/train/write_user_turns.py --minutes 20
  python scripts/train/write_user_turns.py --out /tmp/turns --batches 2 --batch-size 4
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys

from specsample.train.on_policy_stages import evaluation_prompts
from specsample.train.pipeline_data import (
  StageError,
  load_target,
  log,
  progress_bar,
  target_file,
)
from specsample.train.user_turns import TurnDirectory, TurnsError, TurnSettings, write_turns

DEFAULT_TURNS = os.path.join("training_data", "smollm2", "user_turns")


def main(argv=None) -> int:
  d = TurnSettings("", 0, "int8")
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--out", default=DEFAULT_TURNS, help="the turn directory")
  parser.add_argument("--target", default="",
                      help="the target's GGUF file (default: SmolLM2-135M-Instruct)")  # fmt: skip
  parser.add_argument("--activations", choices=("int8", "int8x2", "float32"),
                      default=d.activations, help="the target's arithmetic")  # fmt: skip
  parser.add_argument("--batches", type=int, default=400,
                      help="batches in all (a resumed run goes on to this many)")  # fmt: skip
  parser.add_argument("--minutes", type=float, default=20.0, help="this run's budget")
  parser.add_argument("--batch-size", type=int, default=d.batch_size)
  parser.add_argument("--max-turn-tokens", type=int, default=d.max_turn_tokens)
  parser.add_argument("--temperature", type=float, default=d.temperature)
  parser.add_argument("--top-p", type=float, default=d.top_p)
  parser.add_argument("--seed", type=int, default=d.seed)
  parser.add_argument("--chunk-minutes", type=float, default=5.0)
  args = parser.parse_args(argv)
  if args.batches < 1 or args.batch_size < 1 or args.max_turn_tokens < 1:
    parser.error("--batches, --batch-size and --max-turn-tokens must be positive")
  try:
    path = target_file(args.target)
    target, tokenizer = load_target(args.activations, args.target)
    settings = TurnSettings(
      target=os.path.basename(path), target_bytes=os.path.getsize(path),
      activations=args.activations, batch_size=args.batch_size,
      max_turn_tokens=args.max_turn_tokens, temperature=args.temperature, top_p=args.top_p,
      seed=args.seed,
    )  # fmt: skip
    directory = TurnDirectory(args.out)
    directory.open(settings)
    with progress_bar() as bar:
      task = bar.add_task("user turns", total=None)

      def progress(run, total, kept):
        bar.update(task, completed=run, total=total, description=f"user turns ({kept} kept)")

      report = write_turns(
        target, tokenizer, directory, batches=args.batches, minutes=args.minutes,
        excluded=evaluation_prompts(), chunk_minutes=args.chunk_minutes, progress=progress,
      )  # fmt: skip
  except (StageError, TurnsError) as error:
    sys.exit(str(error))
  log(f"turns: {report.batches_run} batches, {report.turns_kept} kept in "
      f"{report.seconds / 60:.1f} min; {report.batches_done + report.batches_run} of "
      f"{args.batches} batches done")  # fmt: skip
  log(f"directory: {dataclasses.asdict(settings) | directory.summary()}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
