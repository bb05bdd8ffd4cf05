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


# T5 was fine-tuned and evaluated with 512-token inputs and targets (Raffel et al. 2020,
# section 3.1.1); Leviathan et al. 2023 decode those same T5 tasks.
WMT_ENDE = TaskSpec(
  name="wmt_t2t_ende",
  prefix="translate English to German: ",
  input_field="en",
  target_field="de",
  input_length=512,
  target_length=512,
  metric="bleu",
  tfds_name="wmt_t2t_translate/de-en:1.0.0",
)
CNN_DAILYMAIL = TaskSpec(
  name="cnn_dailymail",
  prefix="summarize: ",
  input_field="article",
  target_field="highlights",
  input_length=512,
  target_length=512,
  metric="rouge",
  tfds_name="cnn_dailymail:3.4.0",
)
# The offline miniature: the bundled gettext pair's test split, and standard-library
# functions -> first docstring sentence (specsample.data.docstrings).
GETTEXT_ENDE = TaskSpec(
  name="gettext_ende",
  prefix="translate English to German: ",
  input_field="en",
  target_field="de",
  input_length=48,
  target_length=48,
  metric="bleu",
)
DOCSTRINGS = TaskSpec(
  name="docstrings",
  prefix="summarize: ",
  input_field="code",
  target_field="docstring",
  input_length=64,
  target_length=32,
  metric="rouge",
)
TASKS: dict[str, TaskSpec] = {
  s.name: s for s in (WMT_ENDE, CNN_DAILYMAIL, GETTEXT_ENDE, DOCSTRINGS)
}


def task_spec(name: str, **overrides) -> TaskSpec:
  """The named spec, with fields (lengths, tfds_name, ...) replaced where given."""
  if name not in TASKS:
    raise ValueError(f"unknown task {name!r}; known: {sorted(TASKS)}")
  return dataclasses.replace(TASKS[name], **{k: v for k, v in overrides.items() if v})
