"""Decoder-only checkpoints in Hugging Face names (directories, and GGUF files read into
them by `architectures.read_gguf`) as `DecoderOnly` parameters, and back.

The config comes from the architecture's family (`architectures.config_from_hf`);
`params_from_hf(tensors, config)` maps the tensors (in Llama's names:
`architectures.llama_names`) onto the model's parameters ([out, in] matrices transposed to
[in, out]) and insists on exactly the tensors the config needs, with exactly their shapes.
`save_hf_decoder_only` writes a model as a Llama-family Hugging Face directory.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

import jax.numpy as jnp
import numpy as np

from specsample.checkpoints.architectures.llama import HF_CLASSES, OUTPUT_VOCAB_KEY
from specsample.checkpoints.errors import CheckpointError
from specsample.checkpoints.formats.safetensors import write_safetensors
from specsample.files import FileSet
from specsample.kernels.blocks import BlockMatrix, from_numpy
from specsample.kernels.int8_blocks import Int8BlockMatrix, from_gguf_blocks
from specsample.kernels.matrices import is_block_matrix
from specsample.models.decoder_only import DecoderOnly, DecoderOnlyConfig
from specsample.models.decoder_only.network import parameter_shapes

# How GGUF blocks kept in memory are multiplied (params_from_hf, load_model), and for the
# integer arithmetics the passes that quantize each activation row (Int8BlockMatrix.passes).
ACTIVATIONS = ("float32", "int8", "int8x2")
INTEGER_PASSES = {"int8": 1, "int8x2": 2}

# HF names inside model.layers.{i}. -> (our name inside blocks_{i}/, transposed).
_LAYER_NAMES = {
  "input_layernorm.weight": ("attention_norm/scale", False),
  "self_attn.q_proj.weight": ("query/kernel", True),
  "self_attn.k_proj.weight": ("key/kernel", True),
  "self_attn.v_proj.weight": ("value/kernel", True),
  "self_attn.o_proj.weight": ("out/kernel", True),
  "self_attn.q_proj.bias": ("query/bias", False),
  "self_attn.k_proj.bias": ("key/bias", False),
  "self_attn.v_proj.bias": ("value/bias", False),
  "self_attn.o_proj.bias": ("out/bias", False),
  "self_attn.q_norm.weight": ("query_norm/scale", False),
  "self_attn.k_norm.weight": ("key_norm/scale", False),
  "post_attention_layernorm.weight": ("mlp_norm/scale", False),
  # Gemma's post-norms (architectures.gemma3.llama_style_names gives them these names).
  "post_attention_norm.weight": ("post_attention_norm/scale", False),
  "post_feedforward_norm.weight": ("post_mlp_norm/scale", False),
  "mlp.gate_proj.weight": ("gate/kernel", True),
  "mlp.up_proj.weight": ("up/kernel", True),
  "mlp.down_proj.weight": ("down/kernel", True),
  "mlp.gate_proj.bias": ("gate/bias", False),
  "mlp.up_proj.bias": ("up/bias", False),
  "mlp.down_proj.bias": ("down/bias", False),
}
_GLOBAL_NAMES = {
  "model.embed_tokens.weight": ("embed/embedding", False),
  "model.norm.weight": ("final_norm/scale", False),
  "lm_head.weight": ("lm_head/kernel", True),
  # specsample's own: the token ids of a reduced output layer (config output_vocab_size).
  "lm_head.token_ids": ("output_ids", False),
}
# config.json keys of specsample's own (transformers ignores them; OUTPUT_VOCAB_KEY is
# read by `architectures.llama.config_from_hf`).
SHARED_EMBEDDING_KEY = "specsample_shared_embedding"
_LAYER = re.compile(r"^model\.layers\.(\d+)\.(.+)$")
# Tensors some exports carry that the model recomputes: rotary tables.
_IGNORED = re.compile(r"(rotary_emb\.inv_freq|\.rotary_emb\..*)$")


def hf_name_to_param(name: str) -> tuple[str, bool]:
  """HF tensor name -> (our parameter path, whether to transpose). KeyError if unknown."""
  if name in _GLOBAL_NAMES:
    return _GLOBAL_NAMES[name]
  match = _LAYER.match(name)
  if not match or match.group(2) not in _LAYER_NAMES:
    raise KeyError(name)
  path, transpose = _LAYER_NAMES[match.group(2)]
  return f"blocks_{match.group(1)}/{path}", transpose


def params_from_hf(
  tensors: Mapping[str, np.ndarray],
  config: DecoderOnlyConfig,
  *,
  source: str,
  shared_embedding: np.ndarray | None = None,
  activations: str = "float32",
) -> dict:
  """HF-named tensors -> the parameter tree of `config` (every shape checked first).

  shared_embedding: the input embedding [vocab, d_model] for a checkpoint saved without
  one (a draft that shares its target's, `specsample_shared_embedding` in config.json).
  activations: how GGUF blocks (`BlockMatrix` tensors) are multiplied: "float32" keeps
  them as `BlockMatrix` (float32 arithmetic on the dequantized weights), "int8" repacks
  them as `Int8BlockMatrix` (8-bit activations, integer dot products), "int8x2" as well,
  with each activation's rounding error quantized in a second pass (about 15 bits).
  """
  if activations not in ACTIVATIONS:
    raise ValueError(f"activations must be one of {ACTIVATIONS}, got {activations!r}")
  expected = parameter_shapes(config)
  flat: dict[str, np.ndarray] = {}
  if shared_embedding is not None:
    shared = is_block_matrix(shared_embedding)
    flat["embed/embedding"] = shared_embedding if shared else np.asarray(shared_embedding)
  names: dict[str, tuple[str, bool]] = {}  # our path -> (HF name, transposed)
  for name, tensor in tensors.items():
    if _IGNORED.search(name):
      continue
    if name == "lm_head.weight" and config.tie_word_embeddings:
      continue  # some exports store the tied output layer as well
    try:
      path, transpose = hf_name_to_param(name)
    except KeyError:
      raise CheckpointError(f"{source}: unexpected tensor {name!r} for this model") from None
    if path not in expected:
      raise CheckpointError(
        f"{source}: tensor {name!r} does not belong to this configuration (biases, q/k norms "
        "or an output layer the config does not have)"
      )
    if isinstance(tensor, BlockMatrix):  # GGUF blocks stay [out, in]
      flat[path] = tensor
    else:
      array = np.asarray(tensor)
      flat[path] = array.T if transpose else array
    names[path] = (name, transpose)
  missing = sorted(set(expected) - set(flat))
  if missing:
    raise CheckpointError(
      f"{source}: missing tensors for {missing[:4]}{'...' if len(missing) > 4 else ''}"
    )
  dtype = jnp.dtype(config.dtype)
  tree: dict = {}
  for path, shape in expected.items():
    value = flat[path]
    kept = is_block_matrix(value)
    name, transposed = names.get(path, ("the shared embedding", False))
    have = value.shape if kept or not transposed else value.T.shape  # HF order
    need = shape[::-1] if transposed else shape
    if have != need:
      raise CheckpointError(f"{source}: tensor {name} has shape {have}, the config needs {need}")
    if kept and not transposed and path != "embed/embedding":  # blocks are [out, in]
      raise CheckpointError(f"{source}: {name} cannot be kept in blocks")
    node = tree
    *parents, leaf = path.split("/")
    for part in parents:
      node = node.setdefault(part, {})
    if isinstance(value, Int8BlockMatrix):  # a target's shared embedding, packed already
      node[leaf] = value
    elif kept and activations in INTEGER_PASSES:
      passes = INTEGER_PASSES[activations]
      node[leaf] = from_gguf_blocks(np.asarray(value.blocks), value.format, passes)
    elif kept:
      node[leaf] = from_numpy(value.blocks, value.format)
    else:
      node[leaf] = jnp.asarray(value, jnp.int32 if leaf == "output_ids" else dtype)
  return tree


def param_to_hf_name(path: str) -> tuple[str, bool]:
  """Our parameter path -> (HF tensor name, whether to transpose); inverse of the above."""
  for name, (ours, transpose) in _GLOBAL_NAMES.items():
    if path == ours:
      return name, transpose
  block, rest = path.split("/", 1)
  for name, (ours, transpose) in _LAYER_NAMES.items():
    if rest == ours:
      return f"model.layers.{block.removeprefix('blocks_')}.{name}", transpose
  raise KeyError(path)


def hf_config_of(config: DecoderOnlyConfig, *, model_type: str = "llama") -> dict[str, Any]:
  """The `config.json` transformers reads `config` from (transformers 4 and 5 both read it)."""
  if model_type not in HF_CLASSES:
    raise ValueError(f"model_type must be one of {sorted(HF_CLASSES)}, got {model_type!r}")
  if config.gemma is not None:
    raise ValueError("a config with Gemma's layers has no Llama-family config.json form")
  eos = list(config.eos_ids) if len(config.eos_ids) > 1 else config.eos_id
  hf = {
    "architectures": [HF_CLASSES[model_type]],
    "model_type": model_type,
    "vocab_size": config.vocab_size,
    "hidden_size": config.d_model,
    "intermediate_size": config.mlp_dim,
    "num_hidden_layers": config.num_layers,
    "num_attention_heads": config.num_heads,
    "num_key_value_heads": config.num_kv_heads,
    "head_dim": config.head_dim,
    "hidden_act": "silu",
    "rms_norm_eps": config.layer_norm_epsilon,
    "rope_theta": config.rope_theta,
    "tie_word_embeddings": config.tie_word_embeddings,
    "attention_bias": config.qkv_bias and config.out_bias,
    "mlp_bias": config.mlp_bias,
    "eos_token_id": eos,
    "pad_token_id": config.pad_id,
    "torch_dtype": "float32",
  }
  if config.rope_scaling is not None:
    hf["rope_scaling"] = {"rope_type": config.rope_scaling[0], **dict(config.rope_scaling[1])}
  if model_type == "mistral":
    hf["sliding_window"] = config.sliding_window
  return hf


def save_hf_decoder_only(
  model: DecoderOnly, directory: str | os.PathLike, *, model_type: str = "llama",
  dtype: str = "float32", include_embedding: bool = True,
) -> None:  # fmt: skip
  """Writes `model` as a Hugging Face directory (config.json + model.safetensors) that
  `transformers.AutoModelForCausalLM.from_pretrained` and `load_model` read.

  A reduced output layer (output_vocab_size) is written as specsample's own
  `lm_head.token_ids`, which only `load_model` reads (`expand_output_layer` first for
  transformers). include_embedding=False leaves the input embedding out, for a draft that
  shares its target's (load it with `load_model(..., shared_embedding=...)`).
  """
  if dtype not in ("float32", "float16", "bfloat16"):
    raise ValueError(f"dtype must be float32, float16 or bfloat16, got {dtype!r}")
  if model.config.rope_frequency_factors is not None:
    raise ValueError("rope_frequency_factors (a GGUF rope_freqs tensor) has no config.json form")

  from specsample.checkpoints.t5_params import flatten

  os.makedirs(directory, exist_ok=True)
  tensors = {}
  for keys, value in flatten(model.params).items():
    name, transpose = param_to_hf_name("/".join(keys))
    if name == "model.embed_tokens.weight" and not include_embedding:
      continue
    if name == "lm_head.token_ids":
      tensors[name] = np.asarray(value, np.int32)
      continue
    array = np.asarray(jnp.asarray(value, jnp.float32))
    array = array.T if transpose else array
    if dtype == "bfloat16":
      import ml_dtypes

      array = array.astype(ml_dtypes.bfloat16)
    else:
      array = array.astype(dtype)
    tensors[name] = np.ascontiguousarray(array)
  hf = hf_config_of(model.config, model_type=model_type)
  if model.config.output_vocab_size is not None:
    hf[OUTPUT_VOCAB_KEY] = model.config.output_vocab_size
  if not include_embedding:
    hf[SHARED_EMBEDDING_KEY] = True
  with FileSet(directory) as files:  # both files replaced together, or neither
    write_safetensors(tensors, files.path("model.safetensors"), metadata={"format": "pt"})
    files.write_json("config.json", hf, indent=2)


def expand_output_layer(model: DecoderOnly) -> DecoderOnly:
  """The same model with a full-vocabulary output layer (for export to transformers): the
  reduced layer's rows at their token ids, zero rows elsewhere. Zero rows give logit 0,
  not -inf, so the expanded model's distribution differs where the kept logits are not
  well above 0 (greedy output of speculative decoding stays exact either way)."""
  c = model.config
  if c.output_vocab_size is None:
    return model
  kernel = model.params["lm_head"]["kernel"]  # [d_model, output_vocab]
  full = jnp.zeros((c.d_model, c.vocab_size), kernel.dtype).at[:, model.params["output_ids"]]
  params = {k: v for k, v in model.params.items() if k != "output_ids"}
  params["lm_head"] = {"kernel": full.set(kernel)}
  return DecoderOnly(params=params, config=c.replace(output_vocab_size=None))
