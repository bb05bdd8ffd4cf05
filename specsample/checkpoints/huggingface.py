"""Hugging Face T5 directories: `config.json` + `model.safetensors` (or sharded with
`model.safetensors.index.json`). Names are mapped to T5X's and [out, in] matrices
transposed to T5X's [in, out]; `save_hf_t5` writes the reverse.
"""

from __future__ import annotations

import os
import re

import numpy as np

from specsample.checkpoints import architectures
from specsample.checkpoints.errors import CheckpointError
from specsample.checkpoints.formats.safetensors import (
  read_hf_json,
  read_safetensors,
  safetensors_files,
  write_safetensors,
)
from specsample.checkpoints.t5_params import flatten
from specsample.files import FileSet
from specsample.models.t5 import T5, T5Config, from_hf_config, to_hf_config

_ATTENTION = {"q": "query", "k": "key", "v": "value", "o": "out"}
# HF sublayer index -> (T5X norm name, T5X block name) per stack.
_ENCODER_SUBLAYERS = {
  0: ("pre_attention_layer_norm", "attention"),
  1: ("pre_mlp_layer_norm", "mlp"),
}
_DECODER_SUBLAYERS = {
  0: ("pre_self_attention_layer_norm", "self_attention"),
  1: ("pre_cross_attention_layer_norm", "encoder_decoder_attention"),
  2: ("pre_mlp_layer_norm", "mlp"),
}
# Copies of the shared embedding that HF files may carry.
_EMBEDDING_ALIASES = ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight")
_LAYER = re.compile(
  r"^(encoder|decoder)\.block\.(\d+)\.layer\.(\d+)\."
  r"(?:(SelfAttention|EncDecAttention)\.(q|k|v|o|relative_attention_bias)|"
  r"DenseReluDense\.(wi|wi_0|wi_1|wo)|(layer_norm))\.weight$"
)


# Names outside the per-layer pattern: HF name -> (T5X path, whether to transpose).
_FIXED_NAMES = {
  "shared.weight": ("token_embedder/embedding", False),
  "encoder.final_layer_norm.weight": ("encoder/encoder_norm/scale", False),
  "decoder.final_layer_norm.weight": ("decoder/decoder_norm/scale", False),
  "lm_head.weight": ("decoder/logits_dense/kernel", True),
}


def hf_to_t5x_name(name: str) -> tuple[str, bool]:
  """HF tensor name -> (T5X parameter path, whether to transpose). KeyError if unknown."""
  if name in _FIXED_NAMES:
    return _FIXED_NAMES[name]
  match = _LAYER.match(name)
  if not match:
    raise KeyError(name)
  stack, block, sublayer, _, projection, mlp, norm = match.groups()
  sublayers = _ENCODER_SUBLAYERS if stack == "encoder" else _DECODER_SUBLAYERS
  if int(sublayer) not in sublayers:
    raise KeyError(name)
  norm_name, block_name = sublayers[int(sublayer)]
  prefix = f"{stack}/layers_{block}"
  if norm:
    return f"{prefix}/{norm_name}/scale", False
  if projection == "relative_attention_bias":  # [buckets, heads] -> [heads, buckets]
    return f"{stack}/relpos_bias/rel_embedding", True
  if projection:
    return f"{prefix}/{block_name}/{_ATTENTION[projection]}/kernel", True
  return f"{prefix}/mlp/{mlp}/kernel", True


T5_MODEL_TYPES = ("t5", "mt5", "umt5")


def read_hf_config(directory: str, dtype: str = "float32") -> T5Config:
  path = os.path.join(directory, "config.json")
  hf = read_hf_json(path)
  if hf.get("model_type", "t5") not in T5_MODEL_TYPES:
    readable = architectures.model_types()
    raise CheckpointError(
      f"{path}: model_type {hf.get('model_type')!r} is not one specsample reads (decoder-only: "
      f"{', '.join(readable)}; T5: {', '.join(T5_MODEL_TYPES)})"
    )
  try:
    return from_hf_config(hf, dtype=dtype)
  except ValueError as error:
    raise CheckpointError(f"{path}: {error}") from error


def read_hf_params(directory: str, config: T5Config) -> dict[str, np.ndarray]:
  """All tensors of a HF T5 directory, in T5X names and layouts."""
  flat: dict[str, np.ndarray] = {}
  for path in safetensors_files(directory):
    for name, tensor in read_safetensors(path).items():
      if name in _EMBEDDING_ALIASES:
        flat.setdefault("token_embedder/embedding", tensor)
        continue
      if name.endswith("relative_attention_bias.weight") and ".block.0." not in name:
        continue  # some exports repeat layer 0's table in every layer
      try:
        target, transpose = hf_to_t5x_name(name)
      except KeyError:
        raise CheckpointError(f"{path}: unexpected tensor {name!r} for a T5 model") from None
      flat[target] = tensor.T if transpose else tensor
  if config.tie_word_embeddings:
    flat.pop("decoder/logits_dense/kernel", None)  # lm_head is the shared embedding
  return flat


def t5x_to_hf_name(path: str) -> tuple[str, bool]:
  """T5X parameter path -> (HF tensor name, whether to transpose); inverse of hf_to_t5x_name."""
  for name, (t5x_path, transpose) in _FIXED_NAMES.items():
    if path == t5x_path:
      return name, transpose
  stack, rest = path.split("/", 1)
  if rest == "relpos_bias/rel_embedding":
    return f"{stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight", True
  layer, block_name, leaf = rest.split("/", 2)
  block = layer.removeprefix("layers_")
  sublayers = _ENCODER_SUBLAYERS if stack == "encoder" else _DECODER_SUBLAYERS
  for index, (norm_name, name) in sublayers.items():
    prefix = f"{stack}.block.{block}.layer.{index}"
    if block_name == norm_name:
      return f"{prefix}.layer_norm.weight", False
    if block_name == name == "mlp":
      return f"{prefix}.DenseReluDense.{leaf.split('/')[0]}.weight", True
    if block_name == name:
      kind = "EncDecAttention" if name == "encoder_decoder_attention" else "SelfAttention"
      short = {value: key for key, value in _ATTENTION.items()}[leaf.split("/")[0]]
      return f"{prefix}.{kind}.{short}.weight", True
  raise KeyError(path)


def save_hf_t5(model: T5, directory: str | os.PathLike, *, dtype: str = "float32") -> None:
  """Writes `model` as a Hugging Face T5 directory (config.json + model.safetensors).

  dtype: "float32" or "float16" for the stored tensors (float16 halves the files; the
  loader casts to whatever dtype the model is loaded in).
  """
  if dtype not in ("float32", "float16"):
    raise ValueError(f"dtype must be 'float32' or 'float16', got {dtype!r}")
  directory = str(directory)
  os.makedirs(directory, exist_ok=True)
  tensors = {}
  for keys, value in flatten(model.params).items():
    name, transpose = t5x_to_hf_name("/".join(keys))
    array = np.asarray(value, np.float32).astype(dtype)
    tensors[name] = np.ascontiguousarray(array.T if transpose else array)
  with FileSet(directory) as files:  # both files replaced together, or neither
    write_safetensors(tensors, files.path("model.safetensors"))
    files.write_json("config.json", to_hf_config(model.config), indent=2)
