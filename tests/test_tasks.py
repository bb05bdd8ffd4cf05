"""seqio tasks: T5's preprocessing over TFDS (mock data) and over local files."""

from __future__ import annotations

import json

import pytest

tfds = pytest.importorskip("tensorflow_datasets")  # the seqio extra; installed in CI
import sentencepiece as spm  # noqa: E402
import tensorflow as tf  # noqa: E402

from specsample.bundled import BUNDLE_DIR  # noqa: E402
from specsample.data import tasks  # noqa: E402

VOCAB = str(BUNDLE_DIR / "spiece.model")


@pytest.fixture(scope="module")
def processor():
  return spm.SentencePieceProcessor(model_file=VOCAB)


def expected_ids(processor, text: str, length: int) -> list[int]:
  """T5's inputs: SentencePiece ids trimmed to length - 1, then EOS (1)."""
  return processor.encode(text)[: length - 1] + [1]


@pytest.mark.parametrize(
  ("spec", "source_field", "target_field", "prefix"),
  [
    (tasks.WMT_ENDE, "en", "de", "translate English to German: "),
    (tasks.CNN_DAILYMAIL, "article", "highlights", "summarize: "),
  ],
)
def test_tfds_tasks_apply_t5_preprocessing(processor, spec, source_field, target_field, prefix):
  with tfds.testing.mock_data(num_examples=4, policy=tfds.testing.MockPolicy.USE_CODE):
    raw = list(tfds.load(spec.tfds_name, split="test").as_numpy_iterator())
    task = tasks.build_task(spec, VOCAB)
    examples = tasks.eval_examples(task, spec, "test")
  assert len(examples) == len(raw) == 4
  for example, row in zip(examples, raw, strict=True):
    source = row[source_field].decode()
    assert example.input_text == prefix + source
    assert example.reference == row[target_field].decode()
    assert example.inputs == expected_ids(processor, prefix + source, spec.input_length)
  assert [e.index for e in examples] == [0, 1, 2, 3]


def write_local_files(directory, pairs):
  tsv = directory / "test.tsv"
  tsv.write_text("".join(f"{a}\t{b}\n" for a, b in pairs), encoding="utf-8")
  jsonl = directory / "test.jsonl"
  jsonl.write_text("".join(json.dumps({"en": a, "de": b}) + "\n" for a, b in pairs))
  record = directory / "test.tfrecord"
  with tf.io.TFRecordWriter(str(record)) as writer:
    for a, b in pairs:
      features = {
        k: tf.train.Feature(bytes_list=tf.train.BytesList(value=[v.encode()]))
        for k, v in (("en", a), ("de", b))
      }
      writer.write(
        tf.train.Example(features=tf.train.Features(feature=features)).SerializeToString()
      )
  return {"tsv": tsv, "jsonl": jsonl, "tfrecord": record}


def test_local_sources_give_the_same_examples(tmp_path, processor):
  long_text = " ".join(["Could not open the configuration file"] * 20)
  pairs = [("Open file", "Datei öffnen"), (long_text, "Zu lang"), ("Quit", "Beenden")]
  files = write_local_files(tmp_path, pairs)
  spec = tasks.task_spec("gettext_ende", input_length=16)
  results = {}
  for source, path in files.items():
    task = tasks.build_task(spec, VOCAB, source, files={"test": str(path)})
    results[source] = tasks.eval_examples(task, spec, "test")
  assert results["tsv"] == results["jsonl"] == results["tfrecord"]
  examples = results["tsv"]
  assert [e.reference for e in examples] == [b for _, b in pairs]
  prefix = "translate English to German: "
  assert examples[1].input_text == prefix + long_text
  assert len(examples[1].inputs) == 16 and examples[1].inputs[-1] == 1  # trimmed, EOS kept
  assert examples[1].inputs == expected_ids(processor, prefix + long_text, 16)
  assert len(tasks.eval_examples(task, spec, "test", limit=2)) == 2


def test_local_source_errors_are_clear(tmp_path):
  spec = tasks.GETTEXT_ENDE
  with pytest.raises(FileNotFoundError, match="no file matches"):
    tasks.build_task(spec, VOCAB, "tsv", files={"test": str(tmp_path / "missing.tsv")})
  with pytest.raises(ValueError, match="needs files"):
    tasks.build_task(spec, VOCAB, "jsonl")
  with pytest.raises(ValueError, match="unknown source"):
    tasks.build_task(spec, VOCAB, "csv", files={"test": "x"})
  with pytest.raises(ValueError, match="has no TFDS dataset"):
    tasks.build_task(spec, VOCAB, "tfds")
  with pytest.raises(FileNotFoundError, match="vocabulary"):
    tasks.build_task(spec, str(tmp_path / "none.model"), "tsv", files={"test": "x"})
  bad = tmp_path / "bad.jsonl"
  bad.write_text(json.dumps({"english": "a", "de": "b"}) + "\n")
  task = tasks.build_task(spec, VOCAB, "jsonl", files={"test": str(bad)})
  with pytest.raises(Exception, match="no field 'en'"):
    tasks.eval_examples(task, spec, "test")
  with pytest.raises(ValueError, match="has no split 'validation'"):
    tasks.eval_examples(task, spec, "validation")
