"""The sequences a feature draft's agreement is scored on beyond the held-out responses.

The store's held-out responses (every 20th prompt) are all sampled at temperature 1, as
every 20th prompt is an every-4th one. Their contexts leave the target's greedy path after
each unlikely sampled token, where its next token is harder to guess; speculative greedy
decoding drafts on that path. So the validate stage also scores:

- `greedy_held_out`: the target's greedy responses to the same held-out prompts, the
  contexts greedy decoding drafts in (what the draft cards' agreement was measured on);
- `fit_sample`: as many sampled training responses, whose gap to the held-out ones says
  whether the draft is short of data (a large gap) or of size and steps (none).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from specsample.core import SamplingConfig
from specsample.decoding import generate
from specsample.train.distill_features import FeatureSequence
from specsample.train.feature_draft_options import FeatureDraftOptions, store_paths
from specsample.train.target_responses import right_pad

LIVE_VALIDATION = 200  # validation sequences scored at the end with live features


def scored_live(sequences: Sequence[FeatureSequence], feature_target) -> list[FeatureSequence]:
  """The first LIVE_VALIDATION of `sequences` with their features and the target's greedy
  token after every position, read in one teacher-forced pass (`LiveFeatures`): what
  `distill_features.agreement` scores a sampled response against."""
  from specsample.train.store_features import LiveFeatures

  return LiveFeatures(feature_target)(list(sequences)[:LIVE_VALIDATION], target_next=True)


def scored_validation(options: FeatureDraftOptions, validation: list, feature_target) -> list:
  """The held-out sequences as the options read them: live features (`scored_live`), or
  the shards' features as they are."""
  if options.features != "live":
    return validation
  return scored_live(validation, feature_target)


def response_limit(options: FeatureDraftOptions) -> int:
  """The longest response the training data's generation allowed: the store's (live
  features), else the generate stage's option."""
  if options.features == "live":
    from specsample.train.response_store import ResponseStore

    return max(ResponseStore(p).settings().max_new_tokens for p in store_paths(options))
  return options.max_new_tokens


def fit_sample(train: Sequence[FeatureSequence], count: int) -> list[FeatureSequence]:
  """`count` of the training sequences sampled at temperature > 0, as every held-out
  response is, spread evenly over them (the store's order mixes the tasks)."""
  sampled = [s for s in train if s.temperature > 0]
  stride = max(1, len(sampled) // max(count, 1))
  return sampled[::stride][:count]


def greedy_held_out(
  target,
  sequences: Sequence[FeatureSequence],
  max_new_tokens: int,
  *,
  batch_size: int = 32,
  width_multiple: int = 64,
) -> list[FeatureSequence]:
  """The target's greedy responses (up to `max_new_tokens`, EOS included) to the prompts
  of `sequences`, as FeatureSequences without features (task and index kept, temperature
  0). Prompts go in batches of `batch_size` rows of similar length, right-padded to a
  multiple of `width_multiple` (a short last batch repeats its first row), so that few
  programs compile."""
  order = sorted(range(len(sequences)), key=lambda i: sequences[i].prompt_length)
  responses: dict[int, np.ndarray] = {}
  for start in range(0, len(order), batch_size):
    rows = order[start : start + batch_size]
    prompts = [sequences[i].tokens[: sequences[i].prompt_length] for i in rows]
    padded = prompts + [prompts[0]] * (batch_size - len(prompts))
    lengths = np.asarray([len(p) for p in padded], np.int32)
    width = -(-int(lengths.max()) // width_multiple) * width_multiple
    output = generate(
      target, right_pad(padded, width, target.pad_id), prompt_lengths=lengths,
      max_new_tokens=max_new_tokens, sampling=SamplingConfig(temperature=0.0),
    )  # fmt: skip
    tokens, counts = np.asarray(output.tokens), np.asarray(output.lengths)  # [b, new], [b]
    for row, i in enumerate(rows):
      responses[i] = tokens[row, : counts[row]].astype(np.int32)
  return [
    dataclasses.replace(
      s,
      tokens=np.concatenate([s.tokens[: s.prompt_length], responses[i]]).astype(np.int32),
      features=None,
      temperature=0.0,
      target_next=None,
    )  # fmt: skip
    for i, s in enumerate(sequences)
  ]
