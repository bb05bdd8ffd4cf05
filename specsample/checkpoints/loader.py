"""`load_t5`: any T5 checkpoint (T5X or Hugging Face) as a `T5` model in one call."""

from __future__ import annotations

import os

from specsample.checkpoints.huggingface import read_hf_config, read_hf_params
from specsample.checkpoints.t5_params import CheckpointError, assemble, infer_config
from specsample.checkpoints.t5x import read_t5x_params
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
