"""The target's features of the committed responses, recomputed: never stored in the
repository (they are 1-3 KB a position), rebuilt on the training machine from the token
ids of a `ResponseStore` by batched teacher-forced passes of the target
(`target_responses.read_sequences`: the model contract's `init_state` + `extend`).

Two ways: `LiveFeatures` computes the features of the sequences a training batch draws,
when it draws them (the default of the feature draft's training); `features_into` writes
one feature shard per store shard (`distill_features.read_shards` maps them into memory),
atomically, so that a run cut by its budget resumes at the first store shard without one.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Sequence

import numpy as np

from specsample.train.distill_features import FeatureSequence, features_path
from specsample.train.response_store import ResponseStore, TrainingSequence, read_responses
from specsample.train.target_responses import read_sequences


def read_in_length_order(
  target, token_lists: Sequence[np.ndarray], *, k: int, rows: int, width_multiple: int
) -> list[tuple[np.ndarray, np.ndarray | None]]:
  """The target's features at positions 0 .. N - 2 of each token list (N tokens; position
  j's predicts token j + 1), float16[N - 1, feature size], and with k = 1 its greedy token
  after each of them (int32[N - 1]; else None), in the lists' order. They are read `rows`
  at a time in order of length, each call padded to a multiple of `width_multiple` of its
  own longest (one compiled program per width)."""
  order = sorted(range(len(token_lists)), key=lambda i: len(token_lists[i]))
  read: list = [None] * len(token_lists)
  for start in range(0, len(order), rows):
    chunk = order[start : start + rows]
    top, _, features = read_sequences(target, [token_lists[i].tolist() for i in chunk], k=k,
                                      rows=rows, width_multiple=width_multiple)  # fmt: skip
    for row, i in enumerate(chunk):
      n = len(token_lists[i]) - 1
      read[i] = (features[row, :n], top[row, :n, 0].astype(np.int32) if k else None)
  return read


def read_features(
  target, sequences: Sequence[TrainingSequence], *, rows: int = 8, width_multiple: int = 64
) -> list[np.ndarray]:
  """The target's features at positions 0 .. N - 2 of each prompt + response (N tokens;
  position j's predicts token j + 1): float16[N - 1, feature size] per sequence
  (`read_in_length_order`)."""
  full = [np.concatenate([s.prompt, s.response]) for s in sequences]
  read = read_in_length_order(target, full, k=0, rows=rows, width_multiple=width_multiple)
  return [features for features, _ in read]


def write_feature_shard(path: str, sequences: Sequence[TrainingSequence], features) -> int:
  """Sequences and their features in the training shards' format (`distill_features.
  read_shards`): the features in a .npy beside the .npz (`features_path`: training maps it
  into memory), the .npz written last, each atomically. -> positions written."""
  tokens = [np.concatenate([s.prompt, s.response]).astype(np.int32) for s in sequences]
  temporary = features_path(path)[: -len(".npy")] + ".tmp.npy"
  np.save(temporary, np.concatenate(features))  # float16[sum(N - 1), feature size]
  os.replace(temporary, features_path(path))
  np.savez(
    path + ".tmp.npz",
    tokens=np.concatenate(tokens),
    lengths=np.asarray([len(t) for t in tokens], np.int32),
    prompt_lengths=np.asarray([len(s.prompt) for s in sequences], np.int32),
    index=np.asarray([s.index for s in sequences], np.int32),
    task=np.asarray([s.task for s in sequences]),
    temperature=np.asarray([s.temperature for s in sequences], np.float32),
  )
  os.replace(path + ".tmp.npz", path)
  return sum(len(f) for f in features)


def features_into(
  target,
  store: ResponseStore,
  encode: Callable[[str], list[int]],
  directory: str,
  *,
  minutes: float,
  progress: Callable[[int, int, float], None] | None = None,
) -> tuple[int, int, float]:
  """Feature shards in `directory` for the store's shards that have none, until `minutes`
  are spent (a shard is not begun when the last one's time would overrun them).
  progress(shards done, shards to do, positions per second).
  -> (shards written, positions, seconds)."""
  os.makedirs(directory, exist_ok=True)

  def feature_path(store_path: str) -> str:
    return os.path.join(directory, "store-" + os.path.basename(store_path))

  todo = [p for p in store.shard_paths() if not os.path.exists(feature_path(p))]
  prompts = store.prompts() if todo else []
  begin = time.time()
  deadline, last, written, positions = begin + 60 * minutes, 0.0, 0, 0
  for path in todo:
    start = time.time()
    if start + last > deadline:
      break
    sequences = read_responses(store, encode, paths=[path], prompts=prompts)
    features = read_features(target, sequences)
    positions += write_feature_shard(feature_path(path), sequences, features)
    written += 1
    last = time.time() - start
    if progress is not None:
      progress(written, len(todo), positions / (time.time() - begin))
  return written, positions, time.time() - begin


def store_sequences(
  store: ResponseStore, encode: Callable[[str], list[int]]
) -> list[FeatureSequence]:
  """The store's responses as FeatureSequences without features (None): `LiveFeatures`
  computes them for the sequences a batch draws."""
  return [
    FeatureSequence(
      tokens=np.concatenate([s.prompt, s.response]).astype(np.int32),
      features=None,
      prompt_length=len(s.prompt),
      task=s.task,
      temperature=s.temperature,
      index=s.index,
    )  # fmt: skip
    for s in read_responses(store, encode)
  ]


class LiveFeatures:
  """Fills in the target's features of the sequences a training batch draws, when it draws
  them (`distill_features.batches(..., complete=LiveFeatures(target))`): a teacher-forced
  pass per batch instead of features of the whole store computed and kept beforehand,
  read in order of length (`read_in_length_order`; what the padding costs:
  scripts/dev/measure_live_features.py --layouts)."""

  def __init__(self, target, *, rows: int = 4, width_multiple: int = 32):
    self.target, self.rows, self.width_multiple = target, rows, width_multiple

  def __call__(
    self, sequences: Sequence[FeatureSequence], *, target_next: bool = False
  ) -> list[FeatureSequence]:
    """`sequences` with their features (those without); with `target_next` (validation)
    the target's greedy token after every position too, read in the same pass, for the
    sequences without it: what the draft's agreement is scored against, a sampled
    response's tokens not being the target's argmax."""
    todo = [s for s in sequences if s.features is None or (target_next and s.target_next is None)]
    read = read_in_length_order(self.target, [s.tokens for s in todo], k=int(target_next),
                                rows=self.rows, width_multiple=self.width_multiple)  # fmt: skip
    filled = {}
    for s, (features, target_next_ids) in zip(todo, read, strict=True):
      extra = {"target_next": target_next_ids} if target_next else {}
      filled[id(s)] = dataclasses.replace(s, features=features, **extra)
    return [filled.get(id(s), s) for s in sequences]
