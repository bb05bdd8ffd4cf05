"""Feature drafts on disk: a directory with `config.json` and `model.safetensors`.

config.json is the layer's shape as a Llama `config.json` (what `config_from_hf` reads)
plus `specsample_architecture: "feature_draft"` and the reduced output vocabulary;
model.safetensors holds the fusing map, the layer(s) and `output_ids` under their
parameter paths ("fuse.kernel", "blocks_0.query.kernel", ...). The input embedding and
the output rows are the target's and are not stored: `load_feature_draft` takes them from
the target it is given. A draft that fuses several target layers (EAGLE-3) lists them
under `specsample_feature_layers`; its target must give them (`feature_target`).
"""

from __future__ import annotations

import json
import os

import jax.numpy as jnp
import numpy as np

from specsample.checkpoints.architectures import config_from_hf
from specsample.checkpoints.architectures.llama import OUTPUT_VOCAB_KEY
from specsample.checkpoints.decoder_only import hf_config_of
from specsample.checkpoints.errors import CheckpointError
from specsample.checkpoints.formats.safetensors import read_safetensors, write_safetensors
from specsample.checkpoints.t5_params import flatten
from specsample.files import FileSet
from specsample.kernels import blocks, int8_blocks
from specsample.models.decoder_only import DecoderOnly
from specsample.models.feature_draft import FeatureDraft

ARCHITECTURE_KEY = "specsample_architecture"
ARCHITECTURE = "feature_draft"
FEATURE_LAYERS_KEY = "specsample_feature_layers"  # the target layers it fuses (EAGLE-3)
_DERIVED = ("embed", "output_embedding")  # taken from the target when loading


def is_feature_draft_dir(path: str | os.PathLike) -> bool:
  config = os.path.join(path, "config.json")
  if not os.path.isfile(config):
    return False
  try:
    with open(config) as f:
      return json.load(f).get(ARCHITECTURE_KEY) == ARCHITECTURE
  except (OSError, ValueError):
    return False


def save_feature_draft(
  draft: FeatureDraft, directory: str | os.PathLike, *, dtype: str = "float16"
) -> None:
  """Writes `draft` without the parts it takes from its target."""

  if dtype not in ("float32", "float16"):
    raise ValueError(f"dtype must be float32 or float16, got {dtype!r}")
  os.makedirs(directory, exist_ok=True)
  tensors = {}
  for keys, value in flatten(draft.params).items():
    if keys[0] in _DERIVED:
      continue
    name = ".".join(keys)
    if keys[0] == "output_ids":
      tensors[name] = np.asarray(value, np.int32)
    else:
      tensors[name] = np.ascontiguousarray(np.asarray(value, np.float32).astype(dtype))
  config = hf_config_of(draft.config.replace(output_vocab_size=None))
  config.update({ARCHITECTURE_KEY: ARCHITECTURE, OUTPUT_VOCAB_KEY: draft.config.output_vocab_size})
  if draft.config.feature_layers:
    config[FEATURE_LAYERS_KEY] = list(draft.config.feature_layers)
  with FileSet(directory) as files:  # both files replaced together, or neither
    write_safetensors(tensors, files.path("model.safetensors"))
    files.write_json("config.json", config, indent=2)


def load_feature_draft(
  directory: str | os.PathLike,
  target,
  *,
  dtype: str = "float32",
  block_format: str = "q4_0",
):
  """The feature draft in `directory`, with `target`'s input embedding (shared) and output
  rows of its kept tokens. The target must be the DecoderOnly it was trained for (same
  vocabulary and width; a tied output layer, whose rows are the embedding's). Beside a
  target with 8-bit activations the draft's matrices are kept in `block_format` blocks
  ("q4_0", "q5_0" or "q8_0"; DRAFT_BLOCK_FORMATS)."""
  directory = os.fspath(directory)
  if block_format not in DRAFT_BLOCK_FORMATS:
    raise ValueError(f"block_format must be one of {DRAFT_BLOCK_FORMATS}, got {block_format!r}")
  if not is_feature_draft_dir(directory):
    raise CheckpointError(
      f"{directory}: not a feature draft (no {ARCHITECTURE_KEY} in config.json)"
    )
  with open(os.path.join(directory, "config.json")) as f:
    hf = json.load(f)
  config = config_from_hf(hf, source=directory, dtype=dtype)
  layers = hf.get(FEATURE_LAYERS_KEY, [])
  if not isinstance(layers, list) or not all(isinstance(i, int) for i in layers):
    raise CheckpointError(f"{directory}: {FEATURE_LAYERS_KEY} must be a list of layer indices")
  config = config.replace(feature_layers=tuple(layers))
  if not isinstance(target, DecoderOnly):  # a FeatureTarget whose embedding the draft shares
    raise CheckpointError(f"{directory}: a feature draft needs a decoder-only target")
  target_config = target.config
  if (target_config.vocab_size, target_config.d_model) != (config.vocab_size, config.d_model):
    raise CheckpointError(
      f"{directory}: the draft reads a target of vocabulary {config.vocab_size} and width "
      f"{config.d_model}, this target has {target_config.vocab_size} and "
      f"{target_config.d_model}"
    )
  if any(i >= target_config.num_layers for i in config.feature_layers):
    raise CheckpointError(
      f"{directory}: the draft fuses the target's layers {config.feature_layers}, this "
      f"target has {target_config.num_layers}"
    )
  if not target_config.tie_word_embeddings:
    raise CheckpointError(
      f"{directory}: the draft's output rows are its target's tied embedding's; this target "
      "has a separate output layer"
    )
  params: dict = {}
  for name, array in read_safetensors(os.path.join(directory, "model.safetensors")).items():
    *path, leaf = name.split(".")
    node = params
    for key in path:
      node = node.setdefault(key, {})
    node[leaf] = jnp.asarray(array, jnp.int32 if name == "output_ids" else dtype)
  embedding = target.params["embed"]["embedding"]
  ids = params["output_ids"]
  stored_ids = np.asarray(ids)
  if (
    stored_ids.shape != (config.output_vocab_size,)
    or np.any(np.diff(stored_ids) <= 0)
    or (stored_ids.size and not 0 <= stored_ids[0] <= stored_ids[-1] < config.vocab_size)
  ):
    raise CheckpointError(
      f"{directory}: output_ids must be {config.output_vocab_size} increasing token ids "
      f"below {config.vocab_size} (the draft's greedy tokens break ties by id)"
    )
  if isinstance(embedding, blocks.BlockMatrix):
    rows = blocks.take_rows(embedding, ids).astype(dtype)
  elif isinstance(embedding, int8_blocks.Int8BlockMatrix):
    # The kept rows of the target's blocks, in the draft's own format (below).
    if embedding.format == block_format:
      rows = int8_blocks.select_rows(embedding, stored_ids)
    else:
      rows = _draft_blocks(np.asarray(int8_blocks.take_rows(embedding, ids)), block_format)
  else:
    rows = jnp.take(embedding, ids, axis=0).astype(dtype)
  params["embed"] = {"embedding": embedding}
  params["output_embedding"] = rows
  if isinstance(embedding, int8_blocks.Int8BlockMatrix):
    params = _quantized_projections(params, block_format)
  return FeatureDraft(params=params, config=config)


# The block formats a feature draft's matrices may take beside 8-bit activations; the
# default is Q4_0, 18 bytes per 32 weights (Q8_0 takes 34). The draft's arithmetic never
# changes what is accepted, only how much, and 4 bits cost none of it: 16 held-out chat
# prompts, 96 tokens, gamma 3: 1.69 tokens per target call against Q8_0's 1.63 (docs/
# benchmarks.md, "The draft's step", for its time).
DRAFT_BLOCK_FORMATS = ("q4_0", "q5_0", "q8_0")


def _draft_blocks(matrix: np.ndarray, block_format: str) -> int8_blocks.Int8BlockMatrix:
  """float [out, in] (in a multiple of 32) -> its blocks, for 8-bit activations."""
  import gguf

  kind = getattr(gguf.GGMLQuantizationType, block_format.upper())
  raw = gguf.quants.quantize(np.ascontiguousarray(matrix, np.float32), kind)
  return int8_blocks.from_gguf_blocks(raw, block_format)


def _quantized_projections(params: dict, block_format: str) -> dict:
  """The draft's projection kernels ([in, out], in a multiple of 32) in blocks for 8-bit
  activations, as its target runs (fewer bytes per drafting step)."""

  def convert(node):
    if isinstance(node, dict):
      return {key: convert(value) for key, value in node.items()}
    array = np.asarray(node)
    if array.ndim != 2 or array.shape[0] % 32 or not np.issubdtype(array.dtype, np.floating):
      return node
    return _draft_blocks(array.T, block_format)

  return {
    key: convert(node) if key in ("fuse", "reduce") or key.startswith("blocks_") else node
    for key, node in params.items()
  }


def feature_target(target, draft):
  """`target` giving the features `draft` reads: with the outputs of the layers a fusing
  feature draft names (`DecoderOnly.with_feature_layers`); any other pair as it is."""
  layers = getattr(getattr(draft, "config", None), "feature_layers", ())
  if not layers or not isinstance(target, DecoderOnly):
    return target
  return target.with_feature_layers(layers)
