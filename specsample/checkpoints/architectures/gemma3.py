"""Gemma 3 text models: GGUF files (`general.architecture` "gemma3") and Hugging Face
`Gemma3ForCausalLM` configs, as `DecoderOnly` models.

`read_gguf` reads a GGUF file into what a Hugging Face Gemma 3 directory holds (a
`config.json`-like dict, model_type "gemma3_text", and tensors under HF names, as the
Llama family's does); `config_from_hf` makes the `DecoderOnlyConfig`, and
`llama_style_names` renames Gemma's four norms for `decoder_only.params_from_hf`.

What llama.cpp's converter changes, undone as transformers' GGUF loader undoes it:
- every norm weight is stored plus 1 (llama.cpp multiplies by the weight itself; Gemma by
  1 + weight): 1 is subtracted again, so the model computes (1 + w) as transformers does;
- Q/K rows are not permuted for Gemma (llama.cpp uses the NeoX rotation): read as stored.
What the GGUF does not store takes llama.cpp's (and transformers' defaults') values: the
local layers' rotary base 10,000, every 6th layer global, queries scaled by head_dim^-0.5.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from specsample.checkpoints.architectures import llama
from specsample.checkpoints.architectures.family import Architecture
from specsample.checkpoints.errors import CheckpointError
from specsample.checkpoints.formats import gguf
from specsample.models.decoder_only import DecoderOnlyConfig, GemmaLayers

GGUF_ARCHITECTURE = "gemma3"
MODEL_TYPES = ("gemma3_text",)
HF_CLASS = "Gemma3ForCausalLM"
LOCAL_ROPE_THETA = 10_000.0  # llama.cpp's and transformers' value for Gemma 3
GLOBAL_EVERY = 6  # sliding_window_pattern: layers 5, 11, 17, ... are global

_GLOBAL_NAMES = {
  "token_embd.weight": "model.embed_tokens.weight",
  "output_norm.weight": "model.norm.weight",
  "output.weight": "lm_head.weight",
}
# llama.cpp's names in a Gemma 3 file -> transformers' (the attention and MLP names are the
# Llama family's, written out here: its ffn_norm is Gemma's pre-feedforward norm, not
# Llama's post-attention one, and Gemma has two norms more).
_LAYER_NAMES = {
  "attn_norm.weight": "input_layernorm.weight",
  "attn_q.weight": "self_attn.q_proj.weight",
  "attn_k.weight": "self_attn.k_proj.weight",
  "attn_v.weight": "self_attn.v_proj.weight",
  "attn_output.weight": "self_attn.o_proj.weight",
  "attn_q_norm.weight": "self_attn.q_norm.weight",
  "attn_k_norm.weight": "self_attn.k_norm.weight",
  "post_attention_norm.weight": "post_attention_layernorm.weight",
  "ffn_norm.weight": "pre_feedforward_layernorm.weight",
  "post_ffw_norm.weight": "post_feedforward_layernorm.weight",
  "ffn_gate.weight": "mlp.gate_proj.weight",
  "ffn_up.weight": "mlp.up_proj.weight",
  "ffn_down.weight": "mlp.down_proj.weight",
}
hf_name = gguf.name_map(_GLOBAL_NAMES, _LAYER_NAMES)
# Gemma's HF norm names -> the names decoder_only.params_from_hf maps (its Llama meaning of
# post_attention_layernorm is the norm before the MLP, Gemma's pre_feedforward_layernorm).
_NORM_RENAMES = {
  "post_attention_layernorm.weight": "post_attention_norm.weight",
  "pre_feedforward_layernorm.weight": "post_attention_layernorm.weight",
  "post_feedforward_layernorm.weight": "post_feedforward_norm.weight",
}
_HF_LAYER = re.compile(r"^(model\.layers\.\d+\.)(.+)$")


def gguf_config(reader, path: str) -> dict:
  """A Gemma 3 GGUF file's metadata as its `config.json` would say it."""
  get = gguf.getter(reader, GGUF_ARCHITECTURE, path)

  hidden = int(get("embedding_length", required=True))
  heads = int(get("attention.head_count", required=True))
  head_dim = int(get("attention.key_length") or hidden // heads)
  layers = int(get("block_count", required=True))
  config = {
    "model_type": "gemma3_text",
    "architectures": [HF_CLASS],
    "vocab_size": gguf.vocab_size(reader, GGUF_ARCHITECTURE, path),
    "hidden_size": hidden,
    "intermediate_size": int(get("feed_forward_length", required=True)),
    "num_hidden_layers": layers,
    "num_attention_heads": heads,
    "num_key_value_heads": int(get("attention.head_count_kv", heads)),
    "head_dim": head_dim,
    "hidden_activation": "gelu_pytorch_tanh",
    "rms_norm_eps": float(get("attention.layer_norm_rms_epsilon", required=True)),
    "rope_theta": float(get("rope.freq_base", 1_000_000.0)),
    "rope_local_base_freq": LOCAL_ROPE_THETA,
    "sliding_window": int(get("attention.sliding_window", required=True)),
    "layer_types": [
      "full_attention" if (i + 1) % GLOBAL_EVERY == 0 else "sliding_attention"
      for i in range(layers)
    ],
    "query_pre_attn_scalar": head_dim,
    "max_position_embeddings": int(get("context_length", 32768)),
    "tie_word_embeddings": "output.weight" not in gguf.tensor_names(reader),
  }
  config |= gguf.special_token_ids(reader, path)
  if (scaling := gguf.rope_scaling(reader, GGUF_ARCHITECTURE, path)) is not None:
    config["rope_scaling"] = scaling  # the global layers' (transformers: full_attention)
  return config


def expected_shapes(config: dict) -> dict[str, tuple[int, ...]]:
  """HF name -> shape: a Llama decoder's tensors (`llama.expected_shapes`) and Gemma's
  query/key norms and pre-/post-feedforward norms."""
  shapes = llama.expected_shapes(config, GGUF_ARCHITECTURE, set())
  d, hd = config["hidden_size"], config["head_dim"]
  for i in range(config["num_hidden_layers"]):
    p = f"model.layers.{i}."
    shapes |= {
      p + "self_attn.q_norm.weight": (hd,),
      p + "self_attn.k_norm.weight": (hd,),
      p + "pre_feedforward_layernorm.weight": (d,),
      p + "post_feedforward_layernorm.weight": (d,),
    }
  return shapes


def read_gguf(reader, path: str, *, dtype: str, blocks: bool) -> tuple[dict, dict]:
  """A Gemma 3 GGUF file (its reader given): (config, tensors) in Hugging Face's Gemma 3
  names and layouts ([out, in] matrices; norm weights w of (1 + w))."""
  try:
    config = gguf_config(reader, path)
  except CheckpointError:
    raise
  except (TypeError, ValueError) as error:
    raise CheckpointError(f"{path}: malformed GGUF metadata ({error})") from error

  def undo_plus_one(name: str, rows: np.ndarray, in_blocks: bool) -> np.ndarray:
    if name.endswith("norm.weight") and not in_blocks:
      return rows - np.float32(1.0)  # llama.cpp stored 1 + w
    return rows

  tensors = gguf.read_tensors(
    reader, path, expected_shapes(config), hf_name, config, arch=GGUF_ARCHITECTURE,
    dtype=dtype, blocks=blocks, adjust=undo_plus_one,
  )  # fmt: skip
  return config, tensors


def rope_settings(hf: Mapping[str, Any], source: str) -> tuple[float, Any, float]:
  """(global theta, global rope scaling, local theta) from either transformers spelling:
  rope_parameters per layer type (5.x), or rope_theta / rope_scaling / rope_local_base_freq."""
  parameters = hf.get("rope_parameters") or {}
  if "full_attention" in parameters or "sliding_attention" in parameters:
    full = dict(parameters.get("full_attention") or {})
    sliding = dict(parameters.get("sliding_attention") or {})
    if sliding.get("rope_type", "default") != "default":
      raise CheckpointError(f"{source}: scaled rotary embeddings in the local layers")
    theta, scaling = llama.rope_settings(
      {"rope_parameters": full, "rope_theta": 1_000_000.0}, source
    )
    return theta, scaling, float(sliding.get("rope_theta", LOCAL_ROPE_THETA))
  flat = {key: hf[key] for key in ("rope_theta", "rope_scaling") if key in hf}
  theta, scaling = llama.rope_settings({"rope_theta": 1_000_000.0, **flat}, source)
  return theta, scaling, float(hf.get("rope_local_base_freq", LOCAL_ROPE_THETA))


def config_from_hf(
  hf: Mapping[str, Any], *, source: str, dtype: str = "float32", rope_frequency_factors=None
) -> DecoderOnlyConfig:
  """A Gemma 3 text `config.json` dict (or `read_gguf`'s) -> DecoderOnlyConfig."""
  if rope_frequency_factors is not None:
    raise CheckpointError(f"{source}: rotary frequency factors (rope_freqs) in a Gemma 3 model")
  for key in ("final_logit_softcapping", "attn_logit_softcapping"):
    if hf.get(key) is not None:
      raise CheckpointError(f"{source}: {key} (Gemma 2) is not supported")
  if hf.get("use_bidirectional_attention"):
    raise CheckpointError(f"{source}: bidirectional attention is not supported")
  activation = hf.get("hidden_activation", hf.get("hidden_act", "gelu_pytorch_tanh"))
  if activation not in ("gelu_pytorch_tanh", "gelu_tanh"):
    raise CheckpointError(f"{source}: hidden_activation {activation!r}; only gelu_pytorch_tanh")
  try:
    layers = int(hf["num_hidden_layers"])
    pattern = int(hf.get("sliding_window_pattern", GLOBAL_EVERY))
    kinds = hf.get("layer_types") or [
      "sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(layers)
    ]
    unknown = set(kinds) - {"sliding_attention", "full_attention"}
    if len(kinds) != layers or unknown:
      raise CheckpointError(f"{source}: layer_types {kinds!r} do not fit {layers} layers")
    theta, scaling, local_theta = rope_settings(hf, source)
    heads = int(hf["num_attention_heads"])
    head_dim = int(hf.get("head_dim") or int(hf["hidden_size"]) // heads)
    eos = hf.get("eos_token_id", 1)
    eos = tuple(eos) if isinstance(eos, list) else eos
    pad = hf.get("pad_token_id")
    return DecoderOnlyConfig(
      vocab_size=int(hf["vocab_size"]),
      d_model=int(hf["hidden_size"]),
      num_heads=heads,
      num_kv_heads=int(hf.get("num_key_value_heads") or heads),
      head_dim=head_dim,
      mlp_dim=int(hf["intermediate_size"]),
      num_layers=layers,
      rope_theta=theta,
      rope_scaling=scaling,
      layer_norm_epsilon=float(hf.get("rms_norm_eps", 1e-6)),
      tie_word_embeddings=bool(hf.get("tie_word_embeddings", True)),
      qkv_bias=bool(hf.get("attention_bias", False)),
      out_bias=bool(hf.get("attention_bias", False)),
      qk_norm=True,
      gemma=GemmaLayers(
        query_pre_attn_scalar=float(hf.get("query_pre_attn_scalar") or head_dim),
        local_layers=tuple(i for i, kind in enumerate(kinds) if kind == "sliding_attention"),
        local_window=int(hf.get("sliding_window") or 4096),
        local_rope_theta=local_theta,
      ),
      eos_id=eos if eos is not None else None,
      pad_id=int(pad if pad is not None else 0),
      dtype=dtype,
    )
  except CheckpointError:
    raise
  except (KeyError, TypeError, ValueError) as error:
    raise CheckpointError(f"{source}: not a usable Gemma 3 config ({error!r})") from error


def llama_style_names(tensors: Mapping[str, Any]) -> dict[str, Any]:
  """Gemma's HF tensor names with its norms renamed for `decoder_only.params_from_hf`
  (pre_feedforward_layernorm is the MLP's input norm there; the post-norms get names of
  their own)."""
  renamed = {}
  for name, tensor in tensors.items():
    match = _HF_LAYER.match(name)
    if match and match.group(2) in _NORM_RENAMES:
      name = match.group(1) + _NORM_RENAMES[match.group(2)]
    renamed[name] = tensor
  return renamed


FAMILY = Architecture(
  name="Gemma 3",
  gguf_architectures=(GGUF_ARCHITECTURE,),
  model_types=MODEL_TYPES,
  read_gguf=read_gguf,
  config_from_hf=config_from_hf,
  llama_names=llama_style_names,
)
