"""A draft for a target from what a user names (`--draft`): a checkpoint, a feature
draft's directory, one of SmolLM2's bundled drafts, or prompt lookup over n-grams."""

from __future__ import annotations

import json
import os

from specsample import bundled
from specsample.checkpoints import load_model
from specsample.checkpoints.decoder_only import SHARED_EMBEDDING_KEY
from specsample.checkpoints.feature_draft import is_feature_draft_dir, load_feature_draft
from specsample.models.ngram import NGramDraft

SMOLLM2_VOCAB_SIZE = 49152  # the bundled drafts' vocabulary (SmolLM2's)


def load_draft(
  spec: str,
  target,
  *,
  dtype: str,
  gguf_blocks: bool = False,
  activations: str = "float32",
  preset: str | None = None,
):
  """A draft for `target`: a checkpoint (a T5's architecture `preset` where its shapes
  leave it open); a feature draft's directory (read with the target's embedding and output
  rows); "bundled:feature" / "bundled:token" / "bundled:feature-v1" (SmolLM2's bundled
  drafts); or "ngram" / "ngram:N" (prompt lookup over n-grams up to N)."""
  if preset is not None and (spec.startswith(("ngram", "bundled:")) or is_feature_draft_dir(spec)):
    raise ValueError(f"draft {spec!r}: preset {preset!r} names a T5 architecture; this is no T5")
  if spec == "ngram" or spec.startswith("ngram:"):
    size = spec.partition(":")[2] or "3"
    if not size.isdigit() or not 1 <= int(size) <= 8:
      raise ValueError(f"draft {spec!r}: the n-gram size must be 1..8, e.g. ngram:3")
    return NGramDraft.for_target(target, max_ngram=int(size))
  if spec.startswith("bundled:"):
    kind = spec.partition(":")[2]
    if kind not in bundled.SMOLLM2_DRAFTS:
      known = ", ".join(f"bundled:{name}" for name in bundled.SMOLLM2_DRAFTS)
      raise ValueError(f"draft {spec!r}: the bundled drafts are {known}")
    if not bundled.smollm2_draft_available(kind):
      script = (
        "train_smollm2_feature_draft.py"
        if bundled.is_feature_kind(kind)
        else "train_smollm2_draft.py"
      )
      raise ValueError(
        f"draft {spec!r}: not shipped in {bundled.smollm2_draft_dir(kind)}; build it with "
        f"`python scripts/train/{script}`"
      )
    if target.vocab_size != SMOLLM2_VOCAB_SIZE:
      raise ValueError(
        f"draft {spec!r} belongs to SmolLM2-135M-Instruct (a vocabulary of "
        f"{SMOLLM2_VOCAB_SIZE:,} tokens); this target's vocabulary has {target.vocab_size:,}: "
        "give a draft of the target's own vocabulary, or --draft ngram"
      )
    spec = str(bundled.smollm2_draft_dir(kind))
  if is_feature_draft_dir(spec):
    return load_feature_draft(spec, target, dtype=dtype)
  shared = _shares_embedding(spec)
  embedding = target.params["embed"]["embedding"] if shared and hasattr(target, "params") else None
  return load_model(
    spec,
    dtype=dtype,
    gguf_blocks=gguf_blocks,
    activations=activations if gguf_blocks else "float32",
    shared_embedding=embedding,
    preset=preset,
  )


def _shares_embedding(path: str) -> bool:
  """Whether the draft directory was saved without its input embedding (it shares its
  target's, `specsample_shared_embedding`)."""
  config = os.path.join(path, "config.json")
  if not os.path.isfile(config):
    return False
  try:
    with open(config) as f:
      return bool(json.load(f).get(SHARED_EMBEDDING_KEY))
  except (OSError, ValueError):
    return False
