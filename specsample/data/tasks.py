"""seqio Tasks of the paper's experiments (WMT EnDe, CNN/DM) and of the offline miniature.

Each task is described by a `TaskSpec` (prefix, fields, lengths, metric) and built into a
`seqio.Task` over one of four sources:

- "tfds": the TensorFlow Datasets builder T5 used (`wmt_t2t_translate/de-en`,
  `cnn_dailymail`); `data_dir` where the prepared TFDS data lives (local or gs://);
- "tsv": lines `input<TAB>target`;
- "jsonl": one JSON object per line with the spec's two fields;
- "tfrecord": `tf.train.Example`s with the spec's two string features.

The preprocessing is T5's: `translate English to German: ` + the English text (T5's
`preprocessors.translate`), `summarize: ` + the article (`preprocessors.summarize`), then
SentencePiece tokenization and EOS appended after trimming to the task's lengths. The
pre-tokenized texts stay in the examples (`inputs_pretokenized`, `targets_pretokenized`)
for the metrics.

Tasks are built, not registered: nothing here touches seqio's global registry (call
`seqio.TaskRegistry.add_provider(task.name, task)` to use one in a seqio mixture).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
from collections.abc import Iterator, Mapping

import seqio
import tensorflow as tf

from specsample.data.specs import (  # noqa: F401  (re-exported)
  CNN_DAILYMAIL,
  DOCSTRINGS,
  GETTEXT_ENDE,
  TASKS,
  WMT_ENDE,
  TaskSpec,
  task_spec,
)

SOURCES = ("tfds", "tsv", "jsonl", "tfrecord")


def _check_files(files: Mapping[str, str]) -> None:
  for split, pattern in files.items():
    if not pattern.startswith("gs://") and not tf.io.gfile.glob(pattern):
      raise FileNotFoundError(f"split {split!r}: no file matches {pattern}")


def _jsonl_source(spec: TaskSpec, files: Mapping[str, str]) -> seqio.DataSource:
  fields = (spec.input_field, spec.target_field)

  def read(split: str, shuffle_files: bool = False, seed: int | None = None) -> tf.data.Dataset:
    del shuffle_files, seed  # evaluation reads in file order

    def rows() -> Iterator[tuple[str, str]]:
      for path in sorted(tf.io.gfile.glob(files[split])):
        with tf.io.gfile.GFile(path) as f:
          for number, line in enumerate(f, 1):
            if not line.strip():
              continue
            record = json.loads(line)
            missing = [k for k in fields if k not in record]
            if missing:
              raise KeyError(f"{path}:{number}: no field {missing[0]!r} (fields: {fields})")
            yield tuple(str(record[k]) for k in fields)

    spec_ = tf.TensorSpec([], tf.string)
    dataset = tf.data.Dataset.from_generator(rows, output_signature=(spec_, spec_))
    return dataset.map(lambda a, b: dict(zip(fields, (a, b), strict=True)))

  return seqio.FunctionDataSource(read, splits=tuple(files))


def _parse_tsv(line: tf.Tensor, spec: TaskSpec) -> dict[str, tf.Tensor]:
  parts = tf.strings.split(line, "\t", maxsplit=1)
  tf.debugging.assert_equal(tf.size(parts), 2, message="a TSV line needs input<TAB>target")
  return {spec.input_field: parts[0], spec.target_field: parts[1]}


def data_source(
  spec: TaskSpec,
  source: str = "tfds",
  *,
  files: Mapping[str, str] | None = None,
  data_dir: str | None = None,
) -> tuple[seqio.DataSource, list]:
  """The seqio DataSource and the preprocessors that turn its rows into raw fields.

  `files` maps split names to file patterns (for "tsv", "jsonl", "tfrecord").
  """
  if source not in SOURCES:
    raise ValueError(f"unknown source {source!r}; expected one of {SOURCES}")
  if source == "tfds":
    if not spec.tfds_name:
      raise ValueError(f"task {spec.name} has no TFDS dataset; give local files instead")
    return seqio.TfdsDataSource(tfds_name=spec.tfds_name, tfds_data_dir=data_dir or None), []
  if not files:
    raise ValueError(f"source {source!r} needs files: {{split: path or glob}}")
  _check_files(files)
  if source == "tsv":
    parse = seqio.map_over_dataset(functools.partial(_parse_tsv, spec=spec))
    return seqio.TextLineDataSource(dict(files)), [parse]
  if source == "jsonl":
    return _jsonl_source(spec, files), []
  features = {
    k: tf.io.FixedLenFeature([], tf.string) for k in (spec.input_field, spec.target_field)
  }
  return seqio.TFExampleDataSource(dict(files), feature_description=features), []


def t5_text_preprocessor(spec: TaskSpec):
  """T5's text-to-text step: {"inputs": prefix + input, "targets": target}."""

  @seqio.map_over_dataset
  def to_text(example):
    return {
      "inputs": tf.strings.join([spec.prefix, example[spec.input_field]]),
      "targets": example[spec.target_field],
    }

  return to_text


def build_task(
  spec: TaskSpec,
  vocabulary: seqio.Vocabulary | str,
  source: str = "tfds",
  *,
  files: Mapping[str, str] | None = None,
  data_dir: str | None = None,
) -> seqio.Task:
  """A seqio.Task reading `spec`'s data with T5's preprocessing.

  `vocabulary` is a seqio vocabulary or the path of a SentencePiece model (local or
  gs://; T5's is gs://t5-data/vocabs/cc_all.32000/sentencepiece.model).
  """
  if isinstance(vocabulary, str):
    if not vocabulary.startswith("gs://") and not os.path.isfile(vocabulary):
      raise FileNotFoundError(f"vocabulary {vocabulary}: no such file")
    vocabulary = seqio.SentencePieceVocabulary(vocabulary)
  raw_source, parsers = data_source(spec, source, files=files, data_dir=data_dir)
  features = {
    "inputs": seqio.Feature(vocabulary, add_eos=True),
    "targets": seqio.Feature(vocabulary, add_eos=True),
  }
  return seqio.Task(
    name=f"{spec.name}_{source}",
    source=raw_source,
    output_features=features,
    preprocessors=[
      *parsers,
      t5_text_preprocessor(spec),
      seqio.preprocessors.tokenize,
      seqio.preprocessors.append_eos_after_trim,
    ],
  )


@dataclasses.dataclass(frozen=True)
class EvalExample:
  index: int  # position in the split
  inputs: list[int]  # token ids, EOS last, at most the input length
  input_text: str  # prefix + raw input
  reference: str  # raw target text


def eval_examples(
  task: seqio.Task, spec: TaskSpec, split: str, limit: int | None = None
) -> list[EvalExample]:
  """The first `limit` (all if None) examples of `split`, in order, tokenized and trimmed."""
  if split not in task.source.splits and task.source.splits:
    raise ValueError(f"task {task.name} has no split {split!r}; it has {task.source.splits}")
  dataset = task.get_dataset(
    sequence_length={"inputs": spec.input_length, "targets": spec.target_length},
    split=split,
    shuffle=False,
    use_cached=False,
    try_in_mem_cache=False,
  )
  if limit is not None and limit >= 0:
    dataset = dataset.take(limit)
  examples = []
  for index, example in enumerate(dataset.as_numpy_iterator()):
    examples.append(
      EvalExample(
        index=index,
        inputs=[int(t) for t in example["inputs"]],
        input_text=example["inputs_pretokenized"].decode("utf-8"),
        reference=example["targets_pretokenized"].decode("utf-8"),
      )
    )
  return examples
