"""Trains the bundled feature-level draft of SmolLM2-135M-Instruct (EAGLE-style) here.

The draft reads the target's features (its final-normed hidden states, the output layer's
input) of the committed text and predicts the next feature with one decoder layer; the
target's own output rows (for the draft's reduced vocabulary) turn it into logits
(specsample.models.feature_draft, Li et al. 2024, "EAGLE").

Stages (each resumes from what --work already holds; the default runs the last four):
  prompts   the train prompts (specsample.data.chat_prompts, the train split)
            -> work/train_prompts.jsonl         } a work directory's own responses,
  generate  the target's responses with its     } with features (--features shards):
            features -> work/shards/*.npz       } quick trials
  features  the target's features of every response of the committed store (--store,
            made by scripts/train/generate_on_policy.py) -> --shards (--features shards)
  vocab     the K most frequent target tokens (+ special tokens) -> work/vocab.json
  train     the draft (feature regression + distillation of the target's next-token
            distribution) -> work/checkpoint.npz, work/train_log.json; with --features
            live (the default) each batch's features are computed from the store's ids
            when the batch is drawn
  export    float16 draft (no embedding: it shares the target's) -> BUNDLE/feature_draft
  card      metrics.json and MODEL_CARD.md from the training logs (or, where the work
            directory is gone, the training facts metrics.json already holds), the two
            bench reports, and alpha by task measured on the bench prompts (~4 min)

The stages are specsample.train.feature_draft_recipe (and feature_draft_card); this
script is their command line.

  python scripts/train/train_smollm2_feature_draft.py --work out/smollm2_feature_draft
  python scripts/train/train_smollm2_feature_draft.py --work /tmp/tiny --train-prompts 16 \\
      --stages prompts,generate,vocab,train,export --features shards --generate-minutes 1 \\
      --train-minutes 1 --bundle /tmp/tiny/bundle
"""

from __future__ import annotations

import os
import sys

from specsample.train.feature_draft_options import FEATURE_SOURCES, STAGES, FeatureDraftOptions
from specsample.train.feature_draft_recipe import FeatureDraftRecipe
from specsample.train.pipeline import add_option_flags, recipe_parser, run_command_line
from specsample.train.resume import CHECKPOINT_DTYPES

BUNDLE = os.path.join(os.path.dirname(__file__), "..", "..", "specsample", "bundled", "smollm2")


def main(argv=None) -> int:
  d = FeatureDraftOptions()
  parser = recipe_parser(__doc__.split("\n")[0], d, BUNDLE)
  parser.add_argument("--stages", default=d.stages, help=f"comma-separated, of {','.join(STAGES)}")
  parser.add_argument("--store", default=d.store,
                      help="the committed response stores, comma-separated (vocab, train; "
                      "features reads one)")  # fmt: skip
  parser.add_argument("--features", choices=FEATURE_SOURCES, default=d.features,
                      help="live: the target's features computed for each batch from --store; "
                      "shards: read from --shards (the features or generate stage)")  # fmt: skip
  add_option_flags(parser, d, "features_minutes")
  parser.add_argument("--shards", default=d.shards,
                      help="the feature shards' directory (default: WORK/shards)")  # fmt: skip
  parser.add_argument("--checkpoint-dtype", choices=CHECKPOINT_DTYPES,
                      default=d.checkpoint_dtype,
                      help="bfloat16: half the size, for a committed --work")  # fmt: skip
  add_option_flags(parser, d, "seed")
  parser.add_argument(
    "--target-activations",
    choices=("int8", "float32"),
    default=d.target_activations,
    help="the target's arithmetic for its responses and features (int8: GGUF blocks with "
    "8-bit activations, what generate runs by default)",
  )
  add_option_flags(parser, d, "train_prompts", "generate_batch", "generate_minutes",
                   "max_new_tokens", "output_vocab")  # fmt: skip
  parser.add_argument("--layers", type=int, default=d.layers, help="decoder layers of the draft")
  parser.add_argument(
    "--feature-layers",
    default=d.feature_layers,
    help="target layers (comma-separated indices, e.g. 2,15) whose outputs the draft fuses "
    "with the final state (EAGLE-3); generate the shards with the same",
  )
  add_option_flags(parser, d, "train_steps", "train_minutes", "tokens_per_batch", "learning_rate",
                   "cls_weight", "noise", "prompt_weight")  # fmt: skip
  parser.add_argument(
    "--steps-ahead",
    type=int,
    default=d.steps_ahead,
    help="drafting steps simulated per position (training-time test; 1: target features only)",
  )
  parser.add_argument("--init-from", default=None, help="a feature draft directory to start from")
  parser.add_argument(
    "--previous-log", default=None, help="train_log.json of the run --init-from continues"
  )
  parser.add_argument(
    "--card-note",
    default=None,
    help="a paragraph the model card adds to its training section (e.g. where the draft "
    "--init-from named lives now)",
  )
  parser.add_argument(
    "--bench-prompts",
    default=os.path.join(BUNDLE, "prompts.jsonl"),
    help="the card's alpha by task runs the draft alone on these prompts",
  )
  options = FeatureDraftOptions(**vars(parser.parse_args(argv)))
  return run_command_line(FeatureDraftRecipe(options))


if __name__ == "__main__":
  sys.exit(main())
