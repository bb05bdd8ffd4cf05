"""Hugging Face directories' files: safetensors (single or sharded) and config.json."""

from __future__ import annotations

import json
import os

import numpy as np

from specsample.checkpoints.errors import CheckpointError


def safetensors_files(directory: str) -> list[str]:
  """The safetensors files of a directory: the shards its index names, or model.safetensors."""
  index = os.path.join(directory, "model.safetensors.index.json")
  single = os.path.join(directory, "model.safetensors")
  if os.path.exists(index):
    with open(index) as f:
      try:
        weight_map = json.load(f)["weight_map"]
      except (json.JSONDecodeError, KeyError) as error:
        raise CheckpointError(f"{index}: not a safetensors index ({error})") from error
    files = sorted(set(weight_map.values()))
    missing = [name for name in files if not os.path.exists(os.path.join(directory, name))]
    if missing:
      raise CheckpointError(f"{index} names shards that are not there: {missing}")
    return [os.path.join(directory, name) for name in files]
  if os.path.exists(single):
    return [single]
  raise CheckpointError(
    f"{directory}: no model.safetensors or model.safetensors.index.json (PyTorch .bin files "
    "are not read: convert them with `save_pretrained(..., safe_serialization=True)`)"
  )


def read_safetensors(path: str) -> dict[str, np.ndarray]:
  """Every tensor of a safetensors file (bfloat16 too); CheckpointError naming the file if
  it cannot be read (truncated, not safetensors)."""
  from safetensors import safe_open

  try:
    # framework="flax" reads bfloat16 too (numpy has no bfloat16 of its own).
    with safe_open(path, framework="flax") as f:
      return {name: np.asarray(f.get_tensor(name)) for name in f.keys()}  # noqa: SIM118
  except Exception as error:  # noqa: BLE001 - safetensors raises its own error types
    raise CheckpointError(f"{path}: not a readable safetensors file ({error})") from error


def write_safetensors(tensors: dict, path, metadata: dict | None = None) -> None:
  """safetensors' save_file, its errors (a full disk) raised as OSError naming the file."""
  from safetensors.numpy import save_file

  try:
    save_file(tensors, str(path), metadata=metadata)
  except Exception as error:  # noqa: BLE001 - safetensors raises its own error types
    if isinstance(error, OSError):
      raise
    raise OSError(f"{path}: cannot be written ({error})") from error


def safetensors_matrix_dtypes(directory: str) -> set[str]:
  """The safetensors dtype names ("F32", "BF16", ...) of a Hugging Face directory's
  floating matrices (tensors of two or more axes), from the files' headers alone."""
  from safetensors import safe_open

  dtypes: set[str] = set()
  for path in safetensors_files(directory):
    try:
      with safe_open(path, framework="numpy") as f:
        for name in f.keys():  # noqa: SIM118
          tensor = f.get_slice(name)
          if len(tensor.get_shape()) >= 2 and tensor.get_dtype().startswith(("F", "BF")):
            dtypes.add(tensor.get_dtype())
    except Exception as error:  # noqa: BLE001 - safetensors raises its own error types
      raise CheckpointError(f"{path}: not a readable safetensors file ({error})") from error
  return dtypes


def read_hf_json(path: str) -> dict:
  """A config.json-like file as a dict; CheckpointError naming it if unreadable."""
  try:
    with open(path, encoding="utf-8") as f:
      value = json.load(f)
  except (OSError, json.JSONDecodeError, UnicodeDecodeError) as error:
    raise CheckpointError(f"{path}: cannot read the model config ({error})") from error
  if not isinstance(value, dict):
    raise CheckpointError(f"{path}: expected a JSON object, got {type(value).__name__}")
  return value


def read_hf_tensors(directory: str) -> dict[str, np.ndarray]:
  """Every tensor of a Hugging Face directory (single or sharded safetensors), by name."""
  tensors: dict[str, np.ndarray] = {}
  for path in safetensors_files(directory):
    tensors.update(read_safetensors(path))
  return tensors
