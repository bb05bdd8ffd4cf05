"""The Llama family: Llama (2, 3, 3.x with rope scaling), Mistral (sliding window),
Qwen2 (q/k/v biases), Qwen3 (q/k RMS norms) and SmolLM, from GGUF files and Hugging Face
`config.json` (transformers 4 or 5 spelling: `rope_theta` + `rope_scaling`, or
`rope_parameters`).

llama.cpp stores Llama, Mistral and SmolLM as `llama`. Its converter permutes the rows of
Q and K (and of their biases) within each head, `[2, head_dim // 2] -> [head_dim // 2, 2]`,
for its interleaved rotary embedding; they are permuted back to the rotate-half
convention (K with the number of KV heads). Qwen2/Qwen3 files are written unpermuted
(llama.cpp uses the NeoX rotation for them).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from specsample.checkpoints.architectures.family import Architecture
from specsample.checkpoints.errors import CheckpointError
from specsample.checkpoints.formats import gguf
from specsample.models.decoder_only import DecoderOnlyConfig

# GGUF architecture -> (model_type, HF class, Q/K rows permuted by llama.cpp's converter).
GGUF_ARCHITECTURES = {
  "llama": ("llama", "LlamaForCausalLM", True),
  "qwen2": ("qwen2", "Qwen2ForCausalLM", False),
  "qwen3": ("qwen3", "Qwen3ForCausalLM", False),
}
# config.json model_type -> its transformers class.
HF_CLASSES = {
  "llama": "LlamaForCausalLM",
  "mistral": "MistralForCausalLM",
  "qwen2": "Qwen2ForCausalLM",
  "qwen3": "Qwen3ForCausalLM",
}
# config.json keys of specsample's own (transformers ignores them).
OUTPUT_VOCAB_KEY = "specsample_output_vocab_size"
_GLOBAL_NAMES = {
  "token_embd.weight": "model.embed_tokens.weight",
  "output_norm.weight": "model.norm.weight",
  "output.weight": "lm_head.weight",
  "rope_freqs.weight": "rope_freqs",
}
_LAYER_NAMES = {
  "attn_norm.weight": "input_layernorm.weight",
  "attn_q.weight": "self_attn.q_proj.weight",
  "attn_k.weight": "self_attn.k_proj.weight",
  "attn_v.weight": "self_attn.v_proj.weight",
  "attn_output.weight": "self_attn.o_proj.weight",
  "attn_q.bias": "self_attn.q_proj.bias",
  "attn_k.bias": "self_attn.k_proj.bias",
  "attn_v.bias": "self_attn.v_proj.bias",
  "attn_q_norm.weight": "self_attn.q_norm.weight",
  "attn_k_norm.weight": "self_attn.k_norm.weight",
  "ffn_norm.weight": "post_attention_layernorm.weight",
  "ffn_gate.weight": "mlp.gate_proj.weight",
  "ffn_up.weight": "mlp.up_proj.weight",
  "ffn_down.weight": "mlp.down_proj.weight",
}
hf_name = gguf.name_map(_GLOBAL_NAMES, _LAYER_NAMES)


def gguf_config(reader, path: str) -> dict:
  """A Llama-family GGUF file's metadata as its `config.json` would say it."""
  arch = gguf.scalar(reader, "general.architecture", path, required=True)
  if arch not in GGUF_ARCHITECTURES:
    raise CheckpointError(
      f"{path}: GGUF architecture {arch!r} is not supported (expected one of "
      f"{', '.join(sorted(GGUF_ARCHITECTURES))})"
    )
  model_type, hf_class, _ = GGUF_ARCHITECTURES[arch]
  name = str(gguf.scalar(reader, "general.name", path, default="")).lower()
  if arch == "llama" and "mistral" in name:
    model_type, hf_class = "mistral", "MistralForCausalLM"

  get = gguf.getter(reader, arch, path)
  hidden = int(get("embedding_length", required=True))
  heads = int(get("attention.head_count", required=True))
  head_dim = get("attention.key_length") or get("rope.dimension_count") or hidden // heads
  names = gguf.tensor_names(reader)
  config = {
    "model_type": model_type,
    "architectures": [hf_class],
    "vocab_size": gguf.vocab_size(reader, arch, path),
    "hidden_size": hidden,
    "intermediate_size": int(get("feed_forward_length", required=True)),
    "num_hidden_layers": int(get("block_count", required=True)),
    "num_attention_heads": heads,
    "num_key_value_heads": int(get("attention.head_count_kv", heads)),
    "head_dim": int(head_dim),
    "hidden_act": "silu",
    "rms_norm_eps": float(get("attention.layer_norm_rms_epsilon", required=True)),
    "rope_theta": float(get("rope.freq_base", 10000.0)),
    "max_position_embeddings": int(get("context_length", 2048)),
    "tie_word_embeddings": "output.weight" not in names,
    "attention_bias": "blk.0.attn_q.bias" in names,
  }
  config |= gguf.special_token_ids(reader, path)
  if (scaling := gguf.rope_scaling(reader, arch, path)) is not None:
    config["rope_scaling"] = scaling
  return config


def expected_shapes(config: dict, arch: str, names: set[str]) -> dict[str, tuple[int, ...]]:
  """HF name -> shape for every tensor this config needs (plus the optional ones present)."""
  d, hd = config["hidden_size"], config["head_dim"]
  q, kv = config["num_attention_heads"] * hd, config["num_key_value_heads"] * hd
  ffn, vocab = config["intermediate_size"], config["vocab_size"]
  shapes = {"model.embed_tokens.weight": (vocab, d), "model.norm.weight": (d,)}
  if not config["tie_word_embeddings"]:
    shapes["lm_head.weight"] = (vocab, d)
  if "rope_freqs.weight" in names:
    shapes["rope_freqs"] = (hd // 2,)
  biases = arch == "qwen2" or "blk.0.attn_q.bias" in names
  for i in range(config["num_hidden_layers"]):
    p = f"model.layers.{i}."
    shapes |= {
      p + "input_layernorm.weight": (d,),
      p + "self_attn.q_proj.weight": (q, d),
      p + "self_attn.k_proj.weight": (kv, d),
      p + "self_attn.v_proj.weight": (kv, d),
      p + "self_attn.o_proj.weight": (d, q),
      p + "post_attention_layernorm.weight": (d,),
      p + "mlp.gate_proj.weight": (ffn, d),
      p + "mlp.up_proj.weight": (ffn, d),
      p + "mlp.down_proj.weight": (d, ffn),
    }
    if biases:
      shapes |= {p + "self_attn.q_proj.bias": (q,), p + "self_attn.k_proj.bias": (kv,)}
      shapes[p + "self_attn.v_proj.bias"] = (kv,)
    if arch == "qwen3":
      shapes |= {p + "self_attn.q_norm.weight": (hd,), p + "self_attn.k_norm.weight": (hd,)}
  return shapes


def unpermute_rows(w: np.ndarray, num_heads: int) -> np.ndarray:
  """Undoes llama.cpp's Q/K row permutation: per head, rows [half, 2] -> [2, half].

  w: [num_heads * head_dim, ...] (a weight [out, in] or a bias [out]).
  """
  half = w.shape[0] // num_heads // 2
  return w.reshape(num_heads, half, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def read_gguf(reader, path: str, *, dtype: str, blocks: bool) -> tuple[dict, dict]:
  """A Llama-family GGUF file (its reader given) as (config.json-like dict, tensors under
  Hugging Face names, Q/K rows in the rotate-half order); see `architectures.read_gguf`."""
  try:
    config = gguf_config(reader, path)
  except CheckpointError:
    raise
  except (TypeError, ValueError) as error:  # a value of the wrong type, or not UTF-8
    raise CheckpointError(f"{path}: malformed GGUF metadata ({error})") from error
  arch = gguf.scalar(reader, "general.architecture", path)
  permuted = GGUF_ARCHITECTURES[arch][2]
  heads = {"q": config["num_attention_heads"], "k": config["num_key_value_heads"]}

  def unpermute(target: str, rows: np.ndarray, in_blocks: bool) -> np.ndarray:
    del in_blocks  # whole rows move: blocks stay as they are
    projection = re.search(r"self_attn\.([qk])_proj\.", target)
    return unpermute_rows(rows, heads[projection.group(1)]) if permuted and projection else rows

  expected = expected_shapes(config, arch, gguf.tensor_names(reader))
  tensors = gguf.read_tensors(
    reader, path, expected, hf_name, config, arch=arch, dtype=dtype, blocks=blocks,
    adjust=unpermute, unknown_note=" (mixture-of-experts and other variants are not supported)",
    shape_note=(
      f" from the metadata (d_model {config['hidden_size']}, heads "
      f"{heads['q']}/{heads['k']} x {config['head_dim']}, ffn {config['intermediate_size']}, "
      f"vocab {config['vocab_size']})"
    ),
  )  # fmt: skip
  return config, tensors


def rope_settings(hf: Mapping[str, Any], source: str) -> tuple[float, Any]:
  """(theta, rope_scaling) from either spelling; CheckpointError for kinds not supported."""
  parameters = dict(hf.get("rope_parameters") or {})
  scaling = dict(hf.get("rope_scaling") or {})
  theta = float(parameters.get("rope_theta", hf.get("rope_theta", 10000.0)))
  # transformers 5 writes rope_parameters, 4 wrote rope_scaling: a scaled kind in either wins.
  scaled = parameters.get("rope_type", "default") != "default"
  settings = parameters if scaled or not scaling else {**parameters, **scaling}
  kind = settings.pop("rope_type", settings.pop("type", "default"))
  settings.pop("rope_theta", None)
  if kind == "default":
    return theta, None
  if kind == "linear":
    return theta, ("linear", (("factor", float(settings["factor"])),))
  if kind == "llama3":
    fields = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")
    missing = [f for f in fields if f not in settings]
    if missing:
      raise CheckpointError(f"{source}: llama3 rope scaling lacks {missing}")
    return theta, ("llama3", tuple((f, float(settings[f])) for f in fields))
  raise CheckpointError(
    f"{source}: rope scaling {kind!r} is not supported (supported: default, linear, llama3)"
  )


def config_from_hf(
  hf: Mapping[str, Any], *, source: str, dtype: str = "float32", rope_frequency_factors=None
) -> DecoderOnlyConfig:
  """A Hugging Face `config.json` dict -> DecoderOnlyConfig (CheckpointError if unsupported)."""
  model_type = hf.get("model_type")
  if model_type not in HF_CLASSES:
    raise CheckpointError(f"{source}: model_type {model_type!r} is not of the Llama family")
  if hf.get("hidden_act", "silu") != "silu":
    raise CheckpointError(f"{source}: hidden_act {hf.get('hidden_act')!r}; only silu (SwiGLU)")
  if model_type == "qwen2" and hf.get("use_sliding_window"):
    raise CheckpointError(f"{source}: Qwen2's per-layer sliding window is not supported")
  try:
    heads = int(hf["num_attention_heads"])
    d_model = int(hf["hidden_size"])
    theta, scaling = rope_settings(hf, source)
    eos = hf.get("eos_token_id")
    eos = tuple(eos) if isinstance(eos, list) else eos
    eos_ids = eos if isinstance(eos, tuple) else (eos,) if eos is not None else ()
    pad = hf.get("pad_token_id")
    pad = pad if pad is not None else eos_ids[0] if eos_ids else 0
    attention_bias = bool(hf.get("attention_bias", False))
    return DecoderOnlyConfig(
      vocab_size=int(hf["vocab_size"]),
      d_model=d_model,
      num_heads=heads,
      num_kv_heads=int(hf.get("num_key_value_heads") or heads),
      head_dim=int(hf.get("head_dim") or d_model // heads),
      mlp_dim=int(hf["intermediate_size"]),
      num_layers=int(hf["num_hidden_layers"]),
      rope_theta=theta,
      rope_scaling=scaling,
      rope_frequency_factors=rope_frequency_factors,
      layer_norm_epsilon=float(hf.get("rms_norm_eps", 1e-6)),
      tie_word_embeddings=bool(hf.get("tie_word_embeddings", False)),
      qkv_bias=model_type == "qwen2" or attention_bias,
      out_bias=attention_bias and model_type != "qwen2",
      mlp_bias=bool(hf.get("mlp_bias", False)),
      qk_norm=model_type == "qwen3",
      sliding_window=hf.get("sliding_window") if model_type == "mistral" else None,
      output_vocab_size=hf.get(OUTPUT_VOCAB_KEY),
      eos_id=eos if eos else None,
      pad_id=int(pad),
      dtype=dtype,
    )
  except (KeyError, TypeError, ValueError) as error:
    raise CheckpointError(f"{source}: not a usable {model_type} config ({error!r})") from error


FAMILY = Architecture(
  name="Llama",
  gguf_architectures=tuple(GGUF_ARCHITECTURES),
  model_types=tuple(HF_CLASSES),
  read_gguf=read_gguf,
  config_from_hf=config_from_hf,
)
