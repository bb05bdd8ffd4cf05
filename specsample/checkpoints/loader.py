"""`load_model`: any checkpoint (GGUF, Hugging Face directory or hub id, T5X) as a model
behind the decoding contract, and `load_tokenizer` for its tokenizer; `load_t5` for T5."""

from __future__ import annotations

import os

import numpy as np

from specsample.checkpoints.errors import CheckpointError
from specsample.checkpoints.huggingface import read_hf_config, read_hf_params
from specsample.checkpoints.t5_params import assemble, infer_config
from specsample.checkpoints.t5x import read_t5x_params
from specsample.models.decoder_only import DecoderOnly
from specsample.models.t5 import T5, T5Config, preset


def is_hf_directory(path: str) -> bool:
  return not path.startswith("gs://") and os.path.isfile(os.path.join(path, "config.json"))


def load_t5(
  path: str | os.PathLike, *, dtype: str = "float32", config: T5Config | str | None = None
) -> T5:
  """Loads a T5 (v1.0 or v1.1/Flan) for `generate` / `speculative_generate`.

  Args:
    path: a Hugging Face directory (config.json + model.safetensors[.index.json]) or a
      T5X checkpoint (msgpack file, legacy tensorstore directory, or Orbax directory;
      local or gs://).
    dtype: "float32" (best on CPU) or "bfloat16" (TPU); logits are float32 either way.
    config: the architecture, as a T5Config or a preset name ("t5-small", "t5.1.1-xxl",
      ...). Hugging Face directories carry their own; for T5X checkpoints it is read off
      the parameter shapes unless given.

  Raises:
    CheckpointError naming the file and what was expected when anything does not fit.
  """
  path = str(path).rstrip("/")
  if not path.startswith("gs://") and not os.path.exists(path):
    raise CheckpointError(f"{path}: no such file or directory")
  if isinstance(config, str):
    config = preset(config)
  if is_hf_directory(path):
    config = (config or read_hf_config(path)).replace(dtype=dtype)
    return assemble(read_hf_params(path, config), config, source=path)
  flat = read_t5x_params(path)
  config = (config or infer_config(flat, path)).replace(dtype=dtype)
  return assemble(flat, config, source=path)


def local_path(path_or_hub_id: str | os.PathLike) -> str:
  """A local file or directory for a path, or for a hub id (via the cache)."""
  from specsample.checkpoints.hub import looks_like_hub_id, model_file_in, resolve_hub_id

  text = os.fspath(path_or_hub_id).rstrip("/")
  if text.startswith("gs://"):
    return text
  if looks_like_hub_id(text):
    text = resolve_hub_id(text)
  if not os.path.exists(text):
    raise CheckpointError(f"{text}: no such file or directory (nor a hub id like owner/name)")
  return model_file_in(text) if os.path.isdir(text) else text


def is_gguf(path: str) -> bool:
  if path.endswith(".gguf"):
    return True
  if not os.path.isfile(path):
    return False
  with open(path, "rb") as f:
    return f.read(4) == b"GGUF"


def load_model(
  path_or_hub_id: str | os.PathLike,
  *,
  dtype: str = "float32",
  shared_embedding=None,
  gguf_blocks: bool = False,
  activations: str = "float32",
  cache_dtype: str | None = None,
  preset: str | None = None,
) -> T5 | DecoderOnly:
  """Any checkpoint specsample reads, as a model behind the decoding contract.

  The format and architecture are read off the files:
    - a GGUF file (llama / qwen2 / qwen3 architectures; every tensor type the `gguf`
      package dequantizes) -> DecoderOnly;
    - a Hugging Face directory: Llama / Mistral / Qwen2 / Qwen3 -> DecoderOnly, T5 ->
      T5 (through `load_t5`);
    - a T5X checkpoint (msgpack, tensorstore, Orbax; local or gs://) -> T5;
    - a hub id ("HuggingFaceTB/SmolLM2-135M-Instruct"): the cached snapshot, or a
      download of it (not with HF_HUB_OFFLINE=1), then as above.
  dtype: "float32" (CPUs) or "bfloat16" (accelerators); logits are float32 either way.
  shared_embedding: the input embedding [vocab, d_model] of a draft saved without one
    (it shares its target's: `specsample_shared_embedding` in its config.json).
  gguf_blocks: a GGUF's Q8_0 / Q4_0 / Q4_1 / Q5_0 / Q4_K / Q6_K matrices stay in their blocks
    (`kernels.blocks.BlockMatrix`, dequantized in registers by the CPU kernel: a fifth to
    a quarter of float32's bytes); needs dtype float32. Ignored for other formats.
  activations: how kept blocks are multiplied: "float32" (the float32 product of the
    dequantized weights, equal to the float32 model's arithmetic up to summation order)
    or "int8" (each activation row quantized to 8 bits in blocks of 32, integer dot
    products, as llama.cpp computes: `kernels.int8_blocks`) or "int8x2" (the same with
    each block's rounding error quantized in a second 8-bit pass and its product added:
    about 15 bits per activation, at twice the rows of integer products). Needs
    gguf_blocks.
  cache_dtype: a decoder-only model's key/value caches, "float32" or "bfloat16" (half the
    bytes attention reads); None: bfloat16 under integer activations, else `dtype`.
  preset: a T5 checkpoint's architecture by name ("t5-small", "t5.1.1-xxl", ...; `load_t5`'s
    config): a T5X checkpoint's shapes leave some of it open. Refused for other models.
  Raises CheckpointError naming the file and what was expected.
  """
  from specsample.checkpoints import architectures
  from specsample.checkpoints.decoder_only import (
    ACTIVATIONS,
    SHARED_EMBEDDING_KEY,
    params_from_hf,
  )
  from specsample.checkpoints.formats.safetensors import read_hf_json, read_hf_tensors

  if dtype not in ("float32", "bfloat16"):
    raise ValueError(f"dtype must be 'float32' or 'bfloat16', got {dtype!r}")
  if gguf_blocks and dtype != "float32":
    raise ValueError("gguf_blocks needs dtype 'float32' (the kernel's arithmetic)")
  if activations not in ACTIVATIONS:
    raise ValueError(f"activations must be one of {ACTIVATIONS}, got {activations!r}")
  if activations != "float32" and not gguf_blocks:
    raise ValueError(
      f"activations={activations!r} needs gguf_blocks=True (it multiplies GGUF blocks)"
    )
  if cache_dtype not in (None, "float32", "bfloat16"):
    raise ValueError(f"cache_dtype must be 'float32', 'bfloat16' or None, got {cache_dtype!r}")
  if cache_dtype is None and activations != "float32":
    cache_dtype = "bfloat16"
  path = local_path(path_or_hub_id)
  if preset is not None and (is_gguf(path) or _is_decoder_only_directory(path)):
    raise ValueError(f"{path}: preset {preset!r} names a T5 architecture; this is not a T5")
  if is_gguf(path):
    hf, tensors = architectures.read_gguf(path, blocks=gguf_blocks)
    factors = tensors.pop("rope_freqs", None)
    factors = None if factors is None else tuple(float(f) for f in np.ravel(factors))
    config = architectures.config_from_hf(
      hf, source=path, dtype=dtype, rope_frequency_factors=factors
    ).replace(cache_dtype=cache_dtype)
    tensors = architectures.llama_names(hf, tensors)
    params = params_from_hf(tensors, config, source=path, activations=activations)
    return DecoderOnly(params=params, config=config)
  if is_hf_directory(path):
    hf = read_hf_json(os.path.join(path, "config.json"))
    if architectures.is_decoder_only_config(hf):
      hf = _with_generation_eos(hf, path)
      config = architectures.config_from_hf(hf, source=path, dtype=dtype)
      config = config.replace(cache_dtype=cache_dtype)
      tensors = architectures.llama_names(hf, read_hf_tensors(path))
      if hf.get(SHARED_EMBEDDING_KEY) and shared_embedding is None:
        raise CheckpointError(
          f"{path}: this draft shares its target's input embedding; pass "
          "shared_embedding=target.params['embed']['embedding']"
        )
      params = params_from_hf(tensors, config, source=path, shared_embedding=shared_embedding)
      return DecoderOnly(params=params, config=config)
  return load_t5(path, dtype=dtype, config=preset)


def _is_decoder_only_directory(path: str) -> bool:
  """Whether `path` is a Hugging Face directory of a decoder-only model (its config.json)."""
  from specsample.checkpoints import architectures
  from specsample.checkpoints.formats.safetensors import read_hf_json

  if not is_hf_directory(path):
    return False
  return architectures.is_decoder_only_config(read_hf_json(os.path.join(path, "config.json")))


def stored_weight_format(path_or_hub_id: str | os.PathLike) -> str:
  """The weight format a checkpoint stores, as `--weights` names it: what loads it for a
  CPU without changing a single weight, in the least memory.

  - "gguf": a GGUF file with matrices in block formats the kernel keeps (Q8_0, Q4_0,
    Q4_1, Q5_0, Q4_K, Q6_K);
  - "bfloat16": a GGUF or Hugging Face checkpoint whose weight matrices are all bfloat16
    (widening them to float32 is exact, so bfloat16 weights give the same logits);
  - "float32": anything else (float32 or float16 matrices, T5X checkpoints).
  Reads the files' headers only; raises CheckpointError as `load_model` does.
  """
  from specsample.checkpoints.formats.safetensors import safetensors_matrix_dtypes

  path = local_path(path_or_hub_id)
  if is_gguf(path):
    from specsample.checkpoints.formats.gguf import gguf_matrix_types
    from specsample.kernels.blocks import BLOCK_BYTES

    types = {name.lower() for name in gguf_matrix_types(path)}
    if types & set(BLOCK_BYTES):
      return "gguf"
    return "bfloat16" if types == {"bf16"} else "float32"
  if is_hf_directory(path):
    return "bfloat16" if safetensors_matrix_dtypes(path) == {"BF16"} else "float32"
  return "float32"


def _with_generation_eos(hf: dict, directory: str) -> dict:
  """generation_config.json's eos_token_id (often a list for chat models) wins, as in
  transformers' generate."""
  from specsample.checkpoints.formats.safetensors import read_hf_json

  generation = os.path.join(directory, "generation_config.json")
  if os.path.isfile(generation):
    eos = read_hf_json(generation).get("eos_token_id")
    if eos is not None:
      return {**hf, "eos_token_id": eos}
  return hf


def load_tokenizer(path_or_hub_id: str | os.PathLike):
  """The tokenizer of a checkpoint: `encode`, `decode`, `token_text`, `apply_chat_template`.

  A GGUF file's embedded tokenizer or a Hugging Face directory's tokenizer.json
  (`checkpoints.tokenizer.Tokenizer`); a T5 directory or SentencePiece model gives T5's
  `Vocabulary`. Hub ids resolve as in `load_model`.
  """
  from specsample.checkpoints import tokenizer
  from specsample.checkpoints.vocabulary import SPIECE_NAMES, Vocabulary

  path = local_path(path_or_hub_id)
  has_json = os.path.isfile(os.path.join(path, "tokenizer.json"))
  spiece = [name for name in SPIECE_NAMES if os.path.isfile(os.path.join(path, name))]
  if os.path.isdir(path) and not has_json and spiece:
    return Vocabulary(path)
  if os.path.isfile(path) and not is_gguf(path):
    return Vocabulary(path)
  from specsample.checkpoints import gemma_tokenizer

  if os.path.isfile(path) and gemma_tokenizer.gguf_has_gemma_tokenizer(path):
    return gemma_tokenizer.from_gguf(path)
  return tokenizer.load_tokenizer(path)
