"""Task descriptions (no TensorFlow needed): what each eval task reads and how T5
preprocesses it. `specsample.data.tasks` builds seqio Tasks from them."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class TaskSpec:
  """What a task reads and how T5 preprocesses it."""

  name: str
  prefix: str  # prepended to the input text
  input_field: str  # field of the raw example that becomes the input
  target_field: str  # field that becomes the target
  input_length: int  # tokens, EOS included (longer inputs are trimmed)
  target_length: int  # tokens, EOS included; also the default decode length
  metric: str  # "bleu" or "rouge"
  tfds_name: str | None = None  # TFDS builder[/config]:version, for source "tfds"


def _english_to_german(name: str, length: int, tfds_name: str | None = None) -> TaskSpec:
  """A translation task in T5's English -> German form (fields en, de; BLEU), inputs and
  targets of `length` tokens."""
  return TaskSpec(name, "translate English to German: ", "en", "de", length, length, "bleu",
                  tfds_name)  # fmt: skip


def _summary(
  name: str, input_field: str, target_field: str, input_length: int, target_length: int,
  tfds_name: str | None = None,
) -> TaskSpec:  # fmt: skip
  """A summarization task in T5's form ("summarize: ", ROUGE)."""
  return TaskSpec(name, "summarize: ", input_field, target_field, input_length, target_length,
                  "rouge", tfds_name)  # fmt: skip


# T5 was fine-tuned and evaluated with 512-token inputs and targets (Raffel et al. 2020,
# section 3.1.1); Leviathan et al. 2023 decode those same T5 tasks.
WMT_ENDE = _english_to_german("wmt_t2t_ende", 512, "wmt_t2t_translate/de-en:1.0.0")
CNN_DAILYMAIL = _summary("cnn_dailymail", "article", "highlights", 512, 512, "cnn_dailymail:3.4.0")
# The offline miniature: the bundled gettext pair's test split, and standard-library
# functions -> first docstring sentence (specsample.data.docstrings).
GETTEXT_ENDE = _english_to_german("gettext_ende", 48)
DOCSTRINGS = _summary("docstrings", "code", "docstring", 64, 32)
TASKS: dict[str, TaskSpec] = {
  s.name: s for s in (WMT_ENDE, CNN_DAILYMAIL, GETTEXT_ENDE, DOCSTRINGS)
}


def task_spec(name: str, **overrides) -> TaskSpec:
  """The named spec, with fields (lengths, tfds_name, ...) replaced where given."""
  if name not in TASKS:
    raise ValueError(f"unknown task {name!r}; known: {sorted(TASKS)}")
  return dataclasses.replace(TASKS[name], **{k: v for k, v in overrides.items() if v})
