"""Gemma's tokenizer from a GGUF file's metadata, as a `checkpoints.tokenizer.Tokenizer`.

A Gemma GGUF stores a SentencePiece BPE vocabulary ("llama" in llama.cpp's terms): its
pieces (spaces as "▁", bytes as "<0xNN>"), scores and token types, but no merges. It is
rebuilt with the `tokenizers` library as transformers' GGUF loader builds it
(`GemmaTokenizer`): spaces become "▁" (no prefix space), BPE with byte fallback, merges
recovered from the vocabulary in the order of the file (Gemma's scores do not follow its
merge order), pieces made only of spaces respelled as "▁"s, control tokens as special
tokens and user-defined ones (`<start_of_turn>`, ...) as added tokens, BOS prepended.
`encode` and `apply_chat_template` read special-token text inside user text as plain text,
as `Tokenizer` does for every model (`parse_special=True` to parse it).
"""

from __future__ import annotations

import os

from specsample.checkpoints.errors import CheckpointError
from specsample.checkpoints.tokenizer import Tokenizer

SPACE = "\u2581"  # SentencePiece's visible space
_CONTROL, _USER_DEFINED = 3, 4  # llama.cpp token types
_SPECIAL_KEYS = {
  "bos_token": "bos",
  "eos_token": "eos",
  "unk_token": "unknown",
  "pad_token": "padding",
}


def is_gemma_gguf(metadata: dict) -> bool:
  """Whether a GGUF file's metadata describes a Gemma SentencePiece tokenizer."""
  architecture = str(metadata.get("general.architecture", ""))
  return architecture.startswith("gemma") and metadata.get("tokenizer.ggml.model") == "llama"


def gguf_has_gemma_tokenizer(path: str | os.PathLike) -> bool:
  """Whether a GGUF file embeds a Gemma tokenizer (reads two metadata keys only)."""
  from specsample.checkpoints.formats.gguf import open_reader, scalar

  path = os.fspath(path)
  reader = open_reader(path)
  meta = {
    key: scalar(reader, key, path) for key in ("general.architecture", "tokenizer.ggml.model")
  }
  return is_gemma_gguf(meta)


def recovered_merges(tokens: list[str]) -> list[tuple[str, str]]:
  """BPE merges implied by a vocabulary whose order is its merge order: every split of a
  token into two tokens, earlier tokens first (then longer left pieces, longer right
  pieces), as transformers' `generate_merges` with the tokens' negated indices as scores."""
  vocab = {token: index for index, token in enumerate(tokens)}
  merges = []
  for token, index in vocab.items():
    local = []
    for cut in range(1, len(token)):
      left, right = token[:cut], token[cut:]
      if left in vocab and right in vocab:
        local.append((left, right))
    local.sort(key=lambda pair: (vocab[pair[0]], vocab[pair[1]]))
    merges.extend((left, right, -index) for left, right in local)
  merges.sort(key=lambda merge: (merge[2], len(merge[0]), len(merge[1])), reverse=True)
  return [(left, right) for left, right, _ in merges]


def gemma_backend(tokens: list[str], types: list[int]):
  """The `tokenizers.Tokenizer` of a Gemma vocabulary (pieces in id order, their
  llama.cpp token types)."""
  from tokenizers import AddedToken, decoders, models, normalizers, pre_tokenizers
  from tokenizers import Tokenizer as Backend

  pieces = [SPACE * len(t) if " " in t and not t.strip() else t for t in tokens]
  vocab = {piece: index for index, piece in enumerate(pieces)}
  bpe = models.BPE(
    vocab=vocab, merges=recovered_merges(pieces), fuse_unk=True, unk_token="<unk>",
    byte_fallback=True, dropout=None,
  )  # fmt: skip
  backend = Backend(bpe)
  backend.normalizer = normalizers.Replace(" ", SPACE)
  backend.pre_tokenizer = pre_tokenizers.Split(" ", behavior="merged_with_previous")
  backend.decoder = decoders.Sequence(
    [decoders.Replace(SPACE, " "), decoders.ByteFallback(), decoders.Fuse()]
  )
  backend.add_special_tokens(
    [
      AddedToken(token, normalized=False, special=True)
      for token, kind in zip(tokens, types, strict=True)
      if kind == _CONTROL
    ]
  )
  backend.add_tokens(
    [
      AddedToken(token, normalized=False, special=False)
      for token, kind in zip(tokens, types, strict=True)
      if kind == _USER_DEFINED and token in vocab
    ]
  )
  return backend


def from_gguf(path: str | os.PathLike, metadata: dict | None = None) -> Tokenizer:
  """The Gemma tokenizer a GGUF file embeds (`tokenizer.ggml.*`), with its chat template
  (`tokenizer.chat_template`) where the file has one."""
  from specsample.checkpoints.formats.gguf import read_gguf_metadata

  path = os.fspath(path)
  meta = read_gguf_metadata(path) if metadata is None else metadata
  tokens = meta.get("tokenizer.ggml.tokens")
  if not is_gemma_gguf(meta) or tokens is None:
    raise CheckpointError(f"{path}: no Gemma SentencePiece tokenizer in the GGUF metadata")
  types = meta.get("tokenizer.ggml.token_type") or [1] * len(tokens)
  if len(types) != len(tokens):
    raise CheckpointError(f"{path}: {len(tokens)} tokens but {len(types)} token types")
  try:
    backend = gemma_backend(tokens, types)
  except Exception as error:  # noqa: BLE001 - the Rust side raises its own exception type
    raise CheckpointError(f"{path}: inconsistent Gemma vocabulary ({error})") from error
  return Tokenizer.over_gguf_backend(backend, meta, tokens, _SPECIAL_KEYS, path, add_bos=True)
