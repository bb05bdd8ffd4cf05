"""What live features cost a training step: the SmolLM2 target's teacher-forced features of
a drawn batch (`store_features.LiveFeatures`) against one training step of the feature
draft on that batch, side by side in one run, on the committed response store.

  python scripts/dev/measure_live_features.py --batches 6 --steps-ahead 1 3
"""

from __future__ import annotations

import argparse
import json
import time

import jax
import numpy as np

from specsample.train import distill_features as df
from specsample.train.on_policy_stages import DEFAULT_STORE
from specsample.train.pipeline_data import encode, load_target
from specsample.train.response_store import ResponseStore
from specsample.train.store_features import LiveFeatures, store_sequences


def train_step_seconds(trainer, ids, batches, steps_ahead: int) -> float:
  """The median seconds of a training step on `batches` (the first two, compiling, left
  out; the loss is read every step, so each step is waited for)."""
  draft = df.draft_for_target(trainer, ids, seed=0)
  settings = df.FeatureDistillSettings(steps=len(batches), warmup_steps=1, log_every=1,
                                       steps_ahead=steps_ahead)  # fmt: skip
  times, queue = [], iter(batches)

  def next_batch():
    times.append(time.perf_counter())
    return next(queue)

  df.train(draft, next_batch, settings)
  return float(np.median(np.diff(times)[2:]))


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--store", default=DEFAULT_STORE)
  parser.add_argument("--batches", type=int, default=6, help="timed batches (after 2 warm-ups)")
  parser.add_argument("--tokens-per-batch", type=int, default=4096)
  parser.add_argument("--steps-ahead", type=int, nargs="+", default=[1, 3])
  args = parser.parse_args(argv)
  target, tokenizer = load_target("int8")
  trainer = load_target("float32")[0]
  sequences = store_sequences(ResponseStore(args.store), lambda text: encode(tokenizer, text))
  live = LiveFeatures(target)
  stream = df.batches(sequences, args.tokens_per_batch, seed=0, complete=live)
  batches, feature_seconds = [], []
  for number in range(args.batches + 2):
    start = time.perf_counter()
    batches.append(next(stream))
    if number >= 2:
      feature_seconds.append(time.perf_counter() - start)
  positions = [float(b.weights.astype(bool).sum()) for b in batches[2:]]
  result = {
    "batches": args.batches,
    "positions_per_batch": float(np.mean(positions)),
    "features_seconds_per_batch": float(np.median(feature_seconds)),
    "features_positions_per_second": float(np.sum(positions) / np.sum(feature_seconds)),
  }
  ids = np.unique(np.concatenate([s.tokens for s in sequences[:2000]]))[:8192].astype(np.int32)
  for steps_ahead in args.steps_ahead:
    seconds = train_step_seconds(trainer, ids, batches, steps_ahead)
    result[f"train_step_seconds_steps_ahead_{steps_ahead}"] = seconds
    result[f"live_overhead_steps_ahead_{steps_ahead}"] = (
      result["features_seconds_per_batch"] / seconds
    )
    jax.clear_caches()
  print(json.dumps(result, indent=1))


if __name__ == "__main__":
  main()
