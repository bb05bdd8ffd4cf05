"""Generates SmolLM2-135M-Instruct's own responses to train prompts into the committed
store of the training pipeline, for a time budget; run it again to go on.

The store (`training_data/smollm2/responses` by default) keeps the planned prompts, the
settings and compressed shards of response token ids; commit it after a run. A run with
settings other than the store's is refused. Stages: specsample.train.on_policy_stages.

  python scripts/train/generate_on_policy.py --minutes 60
  python scripts/train/generate_on_policy.py --store /tmp/tiny --prompts 64 --max-batches 2
  python scripts/train/generate_on_policy.py --store training_data/smollm2/responses_turns \
      --prompts-from training_data/smollm2/user_turns --minutes 60
"""

from __future__ import annotations

import argparse
import sys

from specsample.train.on_policy_stages import OnPolicyOptions, run
from specsample.train.pipeline_data import StageError
from specsample.train.response_store import StoreError


def widths(text: str) -> tuple[int, ...]:
  values = tuple(int(w) for w in text.split(","))
  if not values or min(values) < 1:
    raise argparse.ArgumentTypeError(f"widths are positive token counts, got {text!r}")
  return values


def main(argv=None) -> int:
  d = OnPolicyOptions()
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--store", default=d.store, help="the response store directory")
  parser.add_argument("--target", default=d.target,
                      help="the target's GGUF file (default: SmolLM2-135M-Instruct)")  # fmt: skip
  parser.add_argument("--minutes", type=float, default=d.minutes, help="this run's budget")
  parser.add_argument("--prompts", type=int, default=d.prompts,
                      help="prompts to plan when the store is new")  # fmt: skip
  parser.add_argument("--seed", type=int, default=d.seed)
  parser.add_argument("--activations", choices=("int8", "int8x2", "float32"),
                      default=d.activations, help="the target's arithmetic")  # fmt: skip
  parser.add_argument("--max-new-tokens", type=int, default=d.max_new_tokens)
  parser.add_argument("--batch-size", type=int, default=d.batch_size)
  parser.add_argument("--widths", type=widths, default=d.widths,
                      help="comma-separated prompt widths, one compiled program each")  # fmt: skip
  parser.add_argument("--sampled-every", type=int, default=d.sampled_every,
                      help="every n-th prompt is sampled at temperature 1 (0: none)")  # fmt: skip
  parser.add_argument("--shard-minutes", type=float, default=d.shard_minutes)
  parser.add_argument("--max-batches", type=int, default=None)
  parser.add_argument("--prompts-from", default=d.prompts_from,
                      help="a turn directory (write_user_turns.py): its turns are the prompts "
                      "of a new store")  # fmt: skip
  options = OnPolicyOptions(**vars(parser.parse_args(argv)))
  try:
    run(options)
  except (StageError, StoreError) as error:
    sys.exit(str(error))
  return 0


if __name__ == "__main__":
  sys.exit(main())
