"""Evaluates the bundled English->German pair; reproduces the numbers of its model card.

On the frozen test split shipped beside the weights (375 pairs of the gettext data):
BLEU (sacrebleu, default 13a tokenization) of greedy decoding by the target and by the
draft alone, alpha and tokens per target call of the pair (gamma 4, temperatures 0 and
1), and c (draft step / target step, measured on this machine).

  python scripts/train/evaluate_bundled.py [--json metrics.json] [--write-card]

--write-card rewrites specsample/bundled/ende/metrics.json and MODEL_CARD.md from this
run (training facts are kept from the existing metrics.json).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import platform

from specsample.bundled import BUNDLE_DIR
from specsample.data.gettext_pairs import read_tsv
from specsample.eval.translation import evaluate_pair
from specsample.pairs import load_pair

CARD_TEMPLATE = pathlib.Path(__file__).with_name("model_card_template.md")


def write_card(metrics: dict) -> None:
  path = BUNDLE_DIR / "metrics.json"
  stored = json.loads(path.read_text()) if path.exists() else {}
  merged = {**stored, **metrics}
  path.write_text(json.dumps(merged, indent=2))
  training = merged.get("training", {})
  card = CARD_TEMPLATE.read_text().format(
    m=merged,
    t=merged["target_config"],
    d=merged["draft_config"],
    target_training=training.get("target", "see scripts/train/train_bundled.py"),
    draft_training=training.get("draft", "see scripts/train/train_bundled.py"),
    train_pairs=training.get("train_pairs", "?"),
    train_minutes=round(training.get("target_minutes", 0) + training.get("draft_minutes", 0)),
    machine=f"{platform.machine()} ({platform.processor() or 'CPU'})",
  )
  (BUNDLE_DIR / "MODEL_CARD.md").write_text(card)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--test-file", default=str(BUNDLE_DIR / "test.tsv"))
  parser.add_argument("--json", help="also write the metrics here")
  parser.add_argument(
    "--write-card", action="store_true", help="update metrics.json and MODEL_CARD.md"
  )
  args = parser.parse_args()
  pair = load_pair("bundled:ende")
  metrics = evaluate_pair(
    pair.target, pair.draft, pair.tokenizer, read_tsv(args.test_file), prefix=pair.prefix
  )
  print(json.dumps(metrics, indent=2))
  if args.json:
    with open(args.json, "w") as f:
      json.dump(metrics, f, indent=2)
  if args.write_card:
    write_card(metrics)


if __name__ == "__main__":
  main()
