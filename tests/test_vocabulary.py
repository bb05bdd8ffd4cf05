"""T5 tokenization through sentencepiece (and seqio, when installed)."""

from __future__ import annotations

import pytest
import sentencepiece as spm

from specsample.checkpoints import CheckpointError, Vocabulary

TEXT = [
  "Could not open file.",
  "The file could not be saved.",
  "Open the file in a new window.",
  "Save all open files before closing.",
  "A new version is available.",
] * 20


@pytest.fixture(scope="module")
def spiece_dir(tmp_path_factory):
  directory = tmp_path_factory.mktemp("checkpoint")
  corpus = directory / "corpus.txt"
  corpus.write_text("\n".join(TEXT))
  spm.SentencePieceTrainer.train(
    input=str(corpus),
    model_prefix=str(directory / "spiece"),
    vocab_size=40,
    pad_id=0,
    eos_id=1,
    unk_id=2,
    bos_id=-1,
    model_type="unigram",
  )
  return directory


def test_encode_appends_eos_and_decode_stops_there(spiece_dir):
  vocab = Vocabulary(spiece_dir)  # finds spiece.model in the directory
  ids = vocab.encode("Could not open the file.")
  assert ids[-1] == 1 and 1 not in ids[:-1] and 0 not in ids
  assert vocab.decode(ids) == "Could not open the file."
  assert vocab.decode([*ids[:-1], 1, 7, 8]) == "Could not open the file."
  assert vocab.decode([*ids[:-1], 0, 0]) == "Could not open the file."
  assert vocab.vocab_size == 40


def test_missing_or_bad_model(tmp_path):
  with pytest.raises(CheckpointError, match="no SentencePiece model"):
    Vocabulary(tmp_path)
  bad = tmp_path / "spiece.model"
  bad.write_bytes(b"garbage")
  with pytest.raises(CheckpointError, match="not a SentencePiece model"):
    Vocabulary(bad)


def test_seqio_vocabulary_gives_the_same_ids(spiece_dir):
  pytest.importorskip("seqio", reason="seqio is in the [seqio] extra (CI installs it)")
  direct = Vocabulary(spiece_dir)
  through_seqio = Vocabulary(spiece_dir / "spiece.model", use_seqio=True)
  for text in ("Could not open the file.", "Save all files", "new window"):
    assert through_seqio.encode(text) == direct.encode(text)
    assert through_seqio.decode(direct.encode(text)) == direct.decode(direct.encode(text))
