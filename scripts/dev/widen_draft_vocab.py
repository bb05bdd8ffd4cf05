"""A feature draft directory with its kept output tokens widened: the draft's own kept
tokens, then the most frequent response tokens of the committed stores, up to --size.

A feature draft's output rows are its target's (only their ids are stored), so a trained
draft takes more kept tokens without training; this measures whether it uses them:

  python scripts/dev/widen_draft_vocab.py --size 12288 --out /tmp/draft12288
  python scripts/dev/compare_feature_drafts.py specsample/bundled/smollm2/feature_draft \
      /tmp/draft12288 --held-out 24
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys

import numpy as np
from safetensors.numpy import load_file, save_file

from specsample.checkpoints.architectures.llama import OUTPUT_VOCAB_KEY
from specsample.train.response_store import ResponseStore

STORES = "training_data/smollm2/responses,training_data/smollm2/responses_turns"


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--draft", default="specsample/bundled/smollm2/feature_draft")
  parser.add_argument("--stores", default=STORES, help="comma-separated response stores")
  parser.add_argument("--size", type=int, required=True, help="kept tokens of the new draft")
  parser.add_argument("--out", required=True, help="the new draft's directory")
  args = parser.parse_args(argv)
  counts: collections.Counter = collections.Counter()
  for path in args.stores.split(","):
    for shard in ResponseStore(path).shards():
      for response in shard.responses:
        counts.update(response.tokens.tolist())
  tensors = load_file(os.path.join(args.draft, "model.safetensors"))
  original = set(tensors["output_ids"].tolist())
  kept = set(original)
  if args.size <= len(kept):
    sys.exit(f"--size {args.size}: the draft keeps {len(kept)} tokens already")
  for token, _ in counts.most_common():
    if len(kept) >= args.size:
      break
    kept.add(token)
  total = sum(counts.values())
  before = sum(c for t, c in counts.items() if t in original)
  after = sum(c for t, c in counts.items() if t in kept)
  print(f"stored response tokens covered: {before / total:.3f} -> {after / total:.3f}")
  os.makedirs(args.out, exist_ok=True)
  tensors["output_ids"] = np.asarray(sorted(kept), np.int32)  # increasing, as loaded
  save_file(tensors, os.path.join(args.out, "model.safetensors"))
  with open(os.path.join(args.draft, "config.json")) as f:
    config = json.load(f)
  config[OUTPUT_VOCAB_KEY] = len(kept)
  with open(os.path.join(args.out, "config.json"), "w") as f:
    json.dump(config, f, indent=2)
  return 0


if __name__ == "__main__":
  sys.exit(main())
