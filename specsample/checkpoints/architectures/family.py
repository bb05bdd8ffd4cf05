"""`Architecture`: what one family of decoder-only models tells the loaders."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any


def _same_names(tensors: Mapping[str, Any]) -> dict[str, Any]:
  return dict(tensors)


@dataclasses.dataclass(frozen=True)
class Architecture:
  """One family of decoder-only models, as the checkpoint loaders consult it.

  gguf_architectures: the `general.architecture` values of its GGUF files.
  model_types: the `model_type` values of its Hugging Face `config.json`.
  read_gguf(reader, path, *, dtype, blocks) -> (config.json-like dict, tensors under
    Hugging Face names in Hugging Face layouts), the file's own changes undone.
  config_from_hf(hf, *, source, dtype, rope_frequency_factors) -> DecoderOnlyConfig.
  llama_names(tensors) -> the tensors under the names `decoder_only.params_from_hf` maps
    (Llama's, and names of their own for norms Llama lacks).
  """

  name: str
  gguf_architectures: tuple[str, ...]
  model_types: tuple[str, ...]
  read_gguf: Callable
  config_from_hf: Callable
  llama_names: Callable = _same_names
