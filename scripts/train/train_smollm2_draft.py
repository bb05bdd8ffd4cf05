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

import argparse
import os
import sys

from specsample.train.pipeline import run_pipeline
from specsample.train.pipeline_data import StageError
from specsample.train.token_draft_options import TokenDraftOptions
from specsample.train.token_draft_recipe import TokenDraftRecipe

BUNDLE = os.path.join(os.path.dirname(__file__), "..", "..", "specsample", "bundled", "smollm2")


def main(argv=None) -> int:
  d = TokenDraftOptions()
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--work", default=d.work)
  parser.add_argument("--target", default=d.target,
                      help="the target's GGUF file (default: SmolLM2-135M-Instruct)")  # fmt: skip
  parser.add_argument("--bundle", default=BUNDLE, help="where the draft and its card go")
  parser.add_argument("--stages", default=d.stages)
  parser.add_argument("--seed", type=int, default=d.seed)
  parser.add_argument("--train-prompts", type=int, default=d.train_prompts)
  parser.add_argument("--bench-prompts", type=int, default=d.bench_prompts)
  parser.add_argument("--generate-batch", type=int, default=d.generate_batch)
  parser.add_argument("--generate-minutes", type=float, default=d.generate_minutes)
  parser.add_argument("--max-new-tokens", type=int, default=d.max_new_tokens)
  parser.add_argument("--output-vocab", type=int, default=d.output_vocab)
  parser.add_argument(
    "--layers", default=d.layers, help="the target's layers the draft starts from"
  )
  parser.add_argument("--train-steps", type=int, default=d.train_steps)
  parser.add_argument("--train-minutes", type=float, default=d.train_minutes)
  parser.add_argument("--batch-size", type=int, default=d.batch_size)
  parser.add_argument("--learning-rate", type=float, default=d.learning_rate)
  parser.add_argument("--soft-weight", type=float, default=d.soft_weight)
  parser.add_argument("--prompt-weight", type=float, default=d.prompt_weight)
  parser.add_argument(
    "--bench-reports",
    default=d.bench_reports,
    help="report.json of the draft behind prompt lookup, then of the draft alone",
  )
  options = TokenDraftOptions(**vars(parser.parse_args(argv)))
  try:
    run_pipeline(TokenDraftRecipe(options))
  except StageError as error:
    sys.exit(str(error))
  return 0


if __name__ == "__main__":
  sys.exit(main())
