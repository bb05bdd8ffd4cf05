"""Hugging Face hub ids ("HuggingFaceTB/SmolLM2-135M-Instruct") resolved to local files.

The local cache comes first (`huggingface_hub.snapshot_download(local_files_only=True)`):
a model downloaded once loads with no network, and `HF_HUB_OFFLINE=1` (honoured by
huggingface_hub itself) never goes out. Only the files a loader reads are fetched.
"""

from __future__ import annotations

import os
import re

from specsample.checkpoints.errors import CheckpointError

# What a loader reads from a model repository (weights, configs, tokenizers).
MODEL_FILES = (
  "config.json", "generation_config.json", "*.safetensors", "model.safetensors.index.json",
  "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
  "spiece.model", "*.gguf",
)  # fmt: skip
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*/[\w.\-]+$")


def looks_like_hub_id(text: str) -> bool:
  """ "owner/name" that is not a local path (and not gs://)."""
  return bool(_HUB_ID.match(text)) and not os.path.exists(text)


def resolve_hub_id(repo_id: str, *, cache_dir: str | None = None) -> str:
  """The local snapshot directory of a hub model: the cache if it has it, else a download
  (unless HF_HUB_OFFLINE=1). CheckpointError saying what to do when neither works."""
  from huggingface_hub import snapshot_download
  from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

  try:
    return snapshot_download(
      repo_id, cache_dir=cache_dir, local_files_only=True, allow_patterns=list(MODEL_FILES)
    )
  except LocalEntryNotFoundError:
    pass
  if os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes", "on"):
    raise CheckpointError(
      f"{repo_id}: not in the Hugging Face cache and HF_HUB_OFFLINE is set (download it once "
      f"with the network, or pass a local directory or .gguf file)"
    )
  try:
    return snapshot_download(repo_id, cache_dir=cache_dir, allow_patterns=list(MODEL_FILES))
  except (HfHubHTTPError, LocalEntryNotFoundError, OSError) as error:
    raise CheckpointError(
      f"{repo_id}: cannot fetch it from the Hugging Face hub ({error})"
    ) from error


def model_file_in(directory: str) -> str:
  """The checkpoint a directory holds: itself (config.json, T5X) or its one .gguf file."""
  if os.path.isfile(os.path.join(directory, "config.json")):
    return directory
  ggufs = sorted(name for name in os.listdir(directory) if name.endswith(".gguf"))
  if len(ggufs) == 1:
    return os.path.join(directory, ggufs[0])
  if len(ggufs) > 1:
    raise CheckpointError(
      f"{directory} holds several GGUF files ({', '.join(ggufs)}); pass the one to load"
    )
  return directory
