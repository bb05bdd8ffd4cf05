"""What live features cost a training step: the SmolLM2 target's teacher-forced features of
a drawn batch (`store_features.LiveFeatures`) against one training step of the feature
draft on that batch, side by side in one run, on the committed response store.

--layouts R x W ... times LiveFeatures' calls of R sequences padded to a multiple of W,
each on the same drawn batches: a first pass over them (compiling a program per width),
then --passes timed passes, the layouts alternated batch by batch; with the share of the
computed positions that are padding. The first layout's features go to the training steps.

  python scripts/dev/measure_live_features.py --batches 6 --steps-ahead 1 3 \
      [--layouts 4x32 8x128] [--passes 2]
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


def padding_share(drawn, rows: int, width: int) -> float:
  """The share of the positions LiveFeatures(rows=rows, width_multiple=width) computes on
  the drawn batches that are padding (short calls filled with copies, widths rounded)."""
  computed = real = 0
  for chosen in drawn:
    lengths = sorted(len(s.tokens) for s in chosen)
    real += sum(lengths)
    for start in range(0, len(lengths), rows):
      computed += rows * -(-max(lengths[start : start + rows]) // width) * width
  return 1.0 - real / computed


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--store", default=DEFAULT_STORE)
  parser.add_argument("--batches", type=int, default=6, help="batches drawn")
  parser.add_argument("--tokens-per-batch", type=int, default=4096)
  parser.add_argument("--steps-ahead", type=int, nargs="+", default=[1, 3])
  parser.add_argument("--layouts", nargs="+", default=["4x32"], help="rows x width multiple")
  parser.add_argument("--passes", type=int, default=2, help="timed passes over the batches")
  args = parser.parse_args(argv)
  target, tokenizer = load_target("int8")
  trainer = load_target("float32")[0]
  sequences = store_sequences(ResponseStore(args.store), lambda text: encode(tokenizer, text))
  layouts = [tuple(int(n) for n in layout.split("x")) for layout in args.layouts]
  lives = [LiveFeatures(target, rows=rows, width_multiple=width) for rows, width in layouts]
  drawn = []

  def first_layout(chosen):  # records each batch's sequences, read by the first layout
    drawn.append(chosen)
    return lives[0](chosen)

  stream = df.batches(sequences, args.tokens_per_batch, seed=0, complete=first_layout)
  started = time.perf_counter()
  batches = [next(stream) for _ in range(args.batches)]
  first_pass = {0: time.perf_counter() - started}
  for number, live in enumerate(lives[1:], 1):
    started = time.perf_counter()
    for chosen in drawn:
      live(chosen)
    first_pass[number] = time.perf_counter() - started
  timed = {number: [] for number in range(len(lives))}
  for _ in range(args.passes):
    for chosen in drawn:
      for number, live in enumerate(lives):
        started = time.perf_counter()
        live(chosen)
        timed[number].append(time.perf_counter() - started)
  positions = sum(float(b.weights.astype(bool).sum()) for b in batches)
  result = {"batches": args.batches, "positions_per_batch": positions / args.batches}
  for number, (rows, width) in enumerate(layouts):
    steady = float(np.sum(timed[number]) / args.passes)
    result[f"{rows}x{width}"] = {
      "features_positions_per_second": positions / steady,
      "features_seconds_per_batch": steady / args.batches,
      "first_pass_seconds_with_compilation": first_pass[number],
      "padding_share": padding_share(drawn, rows, width),
    }
  first = "{}x{}".format(*layouts[0])
  result["features_seconds_per_batch"] = result[first]["features_seconds_per_batch"]
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
