"""GGUF files (llama.cpp's format): the reader, its metadata and its tensors.

Nothing here knows an architecture: `specsample.checkpoints.architectures` turns a file's
metadata into a `config.json`-like dict and its tensor names into Hugging Face ones, and
calls `read_tensors` with them.

`tensor.shape` lists ggml's dimensions, fastest first (`ne0` = in_features): a GGUF
"[576, 1536]" matrix is numpy/HF `[1536, 576]`; tensors are returned in numpy order.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable, Mapping

import numpy as np

from specsample.checkpoints.errors import CheckpointError
from specsample.kernels.blocks import BLOCK_BYTES, BlockMatrix

DTYPES = ("float32", "float16", "bfloat16")
_BLOCK = re.compile(r"^blk\.(\d+)\.(.+)$")


def open_reader(path: str | os.PathLike):
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
  reader = open_reader(path)
  try:
    return {key: _value(f) for key, f in reader.fields.items() if not key.startswith("GGUF.")}
  except Exception as error:  # noqa: BLE001 - e.g. a string that is not UTF-8
    raise CheckpointError(f"{os.fspath(path)}: unreadable GGUF metadata ({error})") from error


def gguf_tensor_types(path: str | os.PathLike) -> dict[str, str]:
  """Tensor name -> ggml type name ("F32", "Q4_1", "Q6_K", ...), in file order."""
  return {t.name: t.tensor_type.name for t in open_reader(path).tensors}


def gguf_matrix_types(path: str | os.PathLike) -> set[str]:
  """The ggml type names of a GGUF file's matrices (its tensors of two or more axes)."""
  return {t.tensor_type.name for t in open_reader(path).tensors if len(t.shape) >= 2}


def scalar(reader, key: str, path: str, default=None, required: bool = False):
  """Metadata `key` as a plain value (a list of equal values as one), `default` when absent,
  CheckpointError when absent and `required`."""
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


def getter(reader, arch: str, path: str) -> Callable:
  """get(key, default=None, required=False): the architecture's scalar `{arch}.{key}`."""

  def get(key: str, default=None, required: bool = False):
    return scalar(reader, f"{arch}.{key}", path, default=default, required=required)

  return get


def vocab_size(reader, arch: str, path: str) -> int:
  """The vocabulary's size: `{arch}.vocab_size`, else the tokenizer's token count, else the
  embedding's rows (0 without any of them)."""
  tokens = reader.fields.get("tokenizer.ggml.tokens")
  size = scalar(
    reader, f"{arch}.vocab_size", path, len(tokens.data) if tokens is not None else None
  )
  if size is None:
    embedding = next((t for t in reader.tensors if t.name == "token_embd.weight"), None)
    size = int(embedding.shape[-1]) if embedding is not None else 0
  return int(size)


def special_token_ids(reader, path: str) -> dict[str, int | None]:
  """{"bos_token_id", "eos_token_id", "pad_token_id"} from the tokenizer's metadata."""
  ids = {}
  for key, field in (("bos", "bos"), ("eos", "eos"), ("pad", "padding")):
    token_id = scalar(reader, f"tokenizer.ggml.{field}_token_id", path)
    ids[f"{key}_token_id"] = None if token_id is None else int(token_id)
  return ids


def tensor_names(reader) -> set[str]:
  return {t.name for t in reader.tensors}


def name_map(global_names: Mapping[str, str], layer_names: Mapping[str, str]) -> Callable:
  """GGUF tensor name -> Hugging Face name ("blk.3.attn_q.weight" ->
  "model.layers.3.self_attn.q_proj.weight" with layer_names["attn_q.weight"] =
  "self_attn.q_proj.weight"); KeyError for a name of neither map."""

  def hf_name(gguf_name: str) -> str:
    if gguf_name in global_names:
      return global_names[gguf_name]
    match = _BLOCK.match(gguf_name)
    if not match or match.group(2) not in layer_names:
      raise KeyError(gguf_name)
    return f"model.layers.{match.group(1)}.{layer_names[match.group(2)]}"

  return hf_name


def rope_scaling(reader, arch: str, path: str) -> dict | None:
  """The metadata's rope scaling as a `config.json` `rope_scaling` dict (None: unscaled)."""
  kind = scalar(reader, f"{arch}.rope.scaling.type", path)
  factor = scalar(reader, f"{arch}.rope.scaling.factor", path)
  if kind is None and (linear := scalar(reader, f"{arch}.rope.scale_linear", path)):
    kind, factor = "linear", linear  # the older key
  if kind in (None, "none") or factor in (None, 1.0):
    return None
  if kind == "linear":
    return {"rope_type": "linear", "factor": float(factor)}
  if kind == "yarn":
    scaling = {"rope_type": "yarn", "factor": float(factor)}
    original = scalar(reader, f"{arch}.rope.scaling.original_context_length", path)
    if original is not None:
      scaling["original_max_position_embeddings"] = int(original)
    for gguf_key, hf_key in (("yarn_beta_fast", "beta_fast"), ("yarn_beta_slow", "beta_slow")):
      if (value := scalar(reader, f"{arch}.rope.scaling.{gguf_key}", path)) is not None:
        scaling[hf_key] = float(value)
    return scaling
  raise CheckpointError(f"{path}: rope scaling type {kind!r} is not supported (linear, yarn)")


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
  out_dtype = numpy_dtype(dtype)
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


def numpy_dtype(dtype: str) -> np.dtype:
  if dtype == "bfloat16":
    import ml_dtypes

    return np.dtype(ml_dtypes.bfloat16)
  return np.dtype(dtype)
