"""The decoder-only architectures specsample reads, as one table (`FAMILIES`).

Each family (`family.Architecture`) recognises its GGUF files by `general.architecture`
and its Hugging Face directories by `model_type`, reads a GGUF file into what a Hugging
Face directory holds, builds the `DecoderOnlyConfig` from a `config.json` dict and renames
its tensors for `decoder_only.params_from_hf`. A family more is one module here with its
`FAMILY`, and one row below.

  family    GGUF architectures    config.json model_type
  Llama     llama, qwen2, qwen3   llama, mistral, qwen2, qwen3   (architectures/llama.py)
  Gemma 3   gemma3                gemma3_text                    (architectures/gemma3.py)

T5 (encoder-decoder) is read by `checkpoints.loader.load_t5`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from specsample.checkpoints.architectures import gemma3, llama
from specsample.checkpoints.architectures.family import Architecture
from specsample.checkpoints.errors import CheckpointError
from specsample.checkpoints.formats import gguf

FAMILIES: tuple[Architecture, ...] = (llama.FAMILY, gemma3.FAMILY)


def model_types() -> list[str]:
  """Every decoder-only `model_type` a family reads, sorted."""
  return sorted(t for family in FAMILIES for t in family.model_types)


def family_of_config(hf: Mapping[str, Any]) -> Architecture | None:
  """The family of a `config.json` dict, by its model_type; None for none of them."""
  return next((f for f in FAMILIES if hf.get("model_type") in f.model_types), None)


def is_decoder_only_config(hf: Mapping[str, Any]) -> bool:
  return family_of_config(hf) is not None


def config_from_hf(
  hf: Mapping[str, Any], *, source: str, dtype: str = "float32", rope_frequency_factors=None
):
  """A decoder-only `config.json` dict -> DecoderOnlyConfig, by its family
  (CheckpointError naming what is read when no family reads it)."""
  family = family_of_config(hf)
  if family is None:
    known = ", ".join(f"{f.name} ({', '.join(f.model_types)})" for f in FAMILIES)
    raise CheckpointError(
      f"{source}: model_type {hf.get('model_type')!r} ({hf.get('architectures')}) is not "
      f"supported; decoder-only models: {known}; T5 loads through load_t5"
    )
  return family.config_from_hf(
    hf, source=source, dtype=dtype, rope_frequency_factors=rope_frequency_factors
  )


def llama_names(hf: Mapping[str, Any], tensors: Mapping[str, Any]) -> dict[str, Any]:
  """Tensors of a `config.json`'s family under the names `params_from_hf` maps."""
  family = family_of_config(hf)
  return dict(tensors) if family is None else family.llama_names(tensors)


def read_gguf(
  path: str | os.PathLike, *, dtype: str = "float32", blocks: bool = False
) -> tuple[dict, dict]:
  """Reads a GGUF checkpoint as a Hugging Face one, by its family.

  Returns (config, tensors): `config` has the `config.json` keys of the architecture
  (`model_type`, `architectures`, `vocab_size`, `hidden_size`, `intermediate_size`,
  `num_hidden_layers`, `num_attention_heads`, `num_key_value_heads`, `head_dim`,
  `hidden_act`, `attention_bias`, `rms_norm_eps`, `rope_theta`, `max_position_embeddings`,
  `tie_word_embeddings` (true when the file has no `output.weight`), `bos/eos/pad_token_id`,
  `rope_scaling` when the metadata has linear or YaRN scaling; Gemma 3's own keys too);
  `tensors` maps HF names to `dtype` arrays:
    model.embed_tokens.weight                        # [vocab, d_model]
    model.layers.{i}.input_layernorm.weight          # [d_model]
    model.layers.{i}.self_attn.q_proj.weight         # [heads * head_dim, d_model]
    model.layers.{i}.self_attn.{k,v}_proj.weight     # [kv_heads * head_dim, d_model]
    model.layers.{i}.self_attn.o_proj.weight         # [d_model, heads * head_dim]
    model.layers.{i}.self_attn.{q,k,v}_proj.bias     # qwen2 (and llama files that have them)
    model.layers.{i}.self_attn.{q,k}_norm.weight     # [head_dim], qwen3, gemma3
    model.layers.{i}.post_attention_layernorm.weight # [d_model]
    model.layers.{i}.mlp.{gate,up}_proj.weight       # [intermediate, d_model]
    model.layers.{i}.mlp.down_proj.weight            # [d_model, intermediate]
    model.norm.weight                                # [d_model]
    lm_head.weight                                   # [vocab, d_model], only when untied
    rope_freqs                                       # [head_dim // 2], only if present
  `rope_freqs` is how llama.cpp stores llama3-style rope scaling (its metadata then has no
  `rope_scaling`): rotary frequency i is `rope_theta ** (-2 i / head_dim) / rope_freqs[i]`.
  Q/K rows are in the rotate-half (HF) order. Every bad file raises CheckpointError.

  blocks: matrices stored in Q8_0, Q4_0, Q4_1, Q5_0, Q4_K or Q6_K come as
  `kernels.blocks.BlockMatrix` (the file's blocks, [out, in], numpy) instead of `dtype`
  arrays: a model keeps them that way (1.06 / 0.56 / 0.63 / 0.69 / 0.56 / 0.82 bytes per
  weight) and the CPU kernel dequantizes them in registers. Other types (F16, Q5_1, Q5_K,
  ...) are dequantized as without it.
  """
  if dtype not in gguf.DTYPES:
    raise ValueError(f"dtype must be one of {gguf.DTYPES}, got {dtype!r}")
  path = os.fspath(path)
  reader = gguf.open_reader(path)
  try:
    arch = gguf.scalar(reader, "general.architecture", path, required=True)
  except CheckpointError:
    raise
  except (TypeError, ValueError) as error:  # not UTF-8, or of the wrong type
    raise CheckpointError(f"{path}: malformed GGUF metadata ({error})") from error
  family = next((f for f in FAMILIES if arch in f.gguf_architectures), None)
  if family is None:
    known = sorted(a for f in FAMILIES for a in f.gguf_architectures)
    raise CheckpointError(
      f"{path}: GGUF architecture {arch!r} is not supported (expected one of {', '.join(known)})"
    )
  return family.read_gguf(reader, path, dtype=dtype, blocks=blocks)
