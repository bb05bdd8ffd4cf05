"""T5 tokenization: SentencePiece models, directly or through seqio when it is installed."""

from __future__ import annotations

import os
from collections.abc import Sequence

from specsample.checkpoints.errors import CheckpointError

SPIECE_NAMES = ("spiece.model", "sentencepiece.model", "tokenizer.model")


def find_sentencepiece_model(path: str | os.PathLike) -> str:
  """`path` itself if it is a file, else the SentencePiece model inside the directory."""
  path = str(path)
  if os.path.isfile(path):
    return path
  for name in SPIECE_NAMES:
    candidate = os.path.join(path, name)
    if os.path.isfile(candidate):
      return candidate
  raise CheckpointError(f"{path}: no SentencePiece model ({', '.join(SPIECE_NAMES)})")


class Vocabulary:
  """T5's conventions over a SentencePiece model: pad 0, EOS 1 appended to inputs.

  With `use_seqio=True` the encoding goes through `seqio.SentencePieceVocabulary` (same
  model file, same ids), for pipelines that already use seqio.
  """

  def __init__(
    self, path: str | os.PathLike, *, eos_id: int = 1, pad_id: int = 0, use_seqio: bool = False
  ):
    self.path = find_sentencepiece_model(path)
    self.eos_id, self.pad_id = eos_id, pad_id
    if use_seqio:
      import seqio

      self._seqio = seqio.SentencePieceVocabulary(self.path)
      self._processor = self._seqio.tokenizer
    else:
      import sentencepiece as spm

      self._seqio = None
      self._processor = spm.SentencePieceProcessor()
      try:
        ok = self._processor.Load(self.path)
      except (OSError, RuntimeError) as error:
        raise CheckpointError(f"{self.path}: not a SentencePiece model ({error})") from error
      if not ok:
        raise CheckpointError(f"{self.path}: not a SentencePiece model")

  @property
  def vocab_size(self) -> int:
    """Pieces of the SentencePiece model."""
    return int(self._processor.GetPieceSize())

  @property
  def model_vocab_size(self) -> int:
    """The ids a T5 with this vocabulary has: the pieces and 100 sentinels, padded to a
    multiple of 128 (32128 for T5's 32000 pieces, 250112 for mT5's 250000)."""
    return -(-(self.vocab_size + 100) // 128) * 128

  def _checked(self, token) -> int:
    token, size = int(token), self.model_vocab_size
    if not 0 <= token < size:
      raise ValueError(
        f"token id {token} is outside the vocabulary: {self.vocab_size} SentencePiece "
        f"pieces, ids 0..{size - 1} with T5's sentinels and padding"
      )
    return token

  def encode(self, text: str, *, add_eos: bool = True) -> list[int]:
    ids = list(self._seqio.encode(text)) if self._seqio else self._processor.EncodeAsIds(text)
    return [*ids, self.eos_id] if add_eos else ids

  def token_text(self, token: int) -> str:
    """The surface text of one token (SentencePiece's word-start mark as a space); ids
    past the SentencePiece model (T5's sentinels and padding) as <extra_id_N> / <id N>;
    ids outside 0..model_vocab_size - 1 raise a ValueError."""
    token = self._checked(token)
    if token == self.eos_id:
      return "</s>"
    if token >= self.vocab_size:
      return self._beyond_pieces(token)
    return self._processor.IdToPiece(token).replace("\u2581", " ")

  piece_text = token_text

  def _beyond_pieces(self, token: int) -> str:
    sentinel = self.vocab_size + 99 - token  # T5: <extra_id_0> is the last of 100
    return f"<extra_id_{sentinel}>" if 0 <= sentinel < 100 else f"<id {token}>"

  def decode(self, ids: Sequence[int]) -> str:
    """Text of the ids up to the first EOS; padding is dropped; ids past the
    SentencePiece model (T5's sentinels) are written as <extra_id_N> / <id N>. An id
    outside 0..model_vocab_size - 1 raises a ValueError naming it (the whole list is
    checked, also past EOS)."""
    ids = [self._checked(token) for token in ids]
    kept, parts = [], []
    for token in ids:
      if token == self.eos_id:
        break
      if token >= self.vocab_size:
        parts += [self._decode_pieces(kept), self._beyond_pieces(token)]
        kept = []
      elif token != self.pad_id:
        kept.append(token)
    if parts:
      return "".join([*parts, self._decode_pieces(kept)])
    return self._decode_pieces(kept)

  def _decode_pieces(self, kept: list[int]) -> str:
    return self._seqio.decode(kept) if self._seqio else self._processor.DecodeIds(kept)
