"""Trains the bundled draft of SmolLM2-135M-Instruct on this machine (DistillSpec).

Stages (each resumes from what --work already holds):
  1. prompts   chat prompts from this machine's text (specsample.data.chat_prompts): the
               train split, and the bench set from the held-out sources
               -> work/train_prompts.jsonl, specsample/bundled/smollm2/prompts.jsonl
  2. generate  the target's responses (greedy, and temperature 1 for every 4th prompt) with
               its top-k log-probabilities, appended per batch  -> work/responses.jsonl
  3. vocab     the K most frequent response tokens (+ special tokens) -> work/vocab.json
  4. train     the draft, initialised from the target's layers  -> work/checkpoint.npz
  5. export    float16 draft without the input embedding -> specsample/bundled/smollm2/draft
  6. card      metrics.json and MODEL_CARD.md from the training logs and two bench reports,
               made first with (about 25 minutes each on 2 cores):
                 specsample bench --pair smollm2 --out docs/bench/smollm2 [BENCH OPTIONS]
                 specsample bench --pair smollm2 --no-prompt-lookup \\
                   --out docs/bench/smollm2_draft_alone [BENCH OPTIONS]
               with BENCH OPTIONS as docs/smollm2.md gives them

The stages are specsample.train.token_draft_recipe (and token_draft_card); this script
is their command line.

  python scripts/train/train_smollm2_draft.py --work out/smollm2_draft
  python scripts/train/train_smollm2_draft.py --work /tmp/tiny --train-prompts 16 \\
      --generate-minutes 1 --train-minutes 1 --bench-prompts 4 --bundle /tmp/tiny/bundle
"""

from __future__ import annotations

import os
import sys

from specsample.train.pipeline import add_option_flags, recipe_parser, run_command_line
from specsample.train.token_draft_options import TokenDraftOptions
from specsample.train.token_draft_recipe import TokenDraftRecipe

BUNDLE = os.path.join(os.path.dirname(__file__), "..", "..", "specsample", "bundled", "smollm2")


def main(argv=None) -> int:
  d = TokenDraftOptions()
  parser = recipe_parser(__doc__.split("\n")[0], d, BUNDLE)
  add_option_flags(parser, d, "stages", "seed", "train_prompts", "bench_prompts", "generate_batch",
                   "generate_minutes", "max_new_tokens", "output_vocab")  # fmt: skip
  parser.add_argument(
    "--layers", default=d.layers, help="the target's layers the draft starts from"
  )
  add_option_flags(parser, d, "train_steps", "train_minutes", "batch_size", "learning_rate",
                   "soft_weight", "prompt_weight")  # fmt: skip
  options = TokenDraftOptions(**vars(parser.parse_args(argv)))
  return run_command_line(TokenDraftRecipe(options))


if __name__ == "__main__":
  sys.exit(main())
