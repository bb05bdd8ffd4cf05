"""Eval configurations (ml_collections) and their resolution into a checked pipeline.

`table2_config(task, draft, temperature)` is one row of the paper's Table 2 (T5-XXL target,
the original T5 1.0 checkpoints, the paper's gamma); `miniature_config(task)` runs the
same pipeline offline on the bundled pairs. `configs/*.py` wrap these in `get_config()`;
every field can be overridden on the command line (`--config.gamma=5`).

`resolve(config)` checks every field and returns a `Pipeline`: the task spec with its
lengths, the two models' architectures and parameter counts, the paths, and the decoding
settings. It needs no weights and no data, so a dry run validates a config anywhere.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os

import ml_collections

from specsample.eval.errors import ConfigError
from specsample.eval.paper import DRAFTS, TABLE2, TASKS, paper_row, row_key

T5X_ROOT = "gs://t5-data/pretrained_models/t5x"
# The original T5 (1.0) checkpoints: the paper's target (11B = "T5-XXL") and drafts.
T5X_CHECKPOINTS = {
  "t5-small": f"{T5X_ROOT}/t5_small/checkpoint_1000000",
  "t5-base": f"{T5X_ROOT}/t5_base/checkpoint_1000000",
  "t5-large": f"{T5X_ROOT}/t5_large/checkpoint_1000000",
  "t5-11b": f"{T5X_ROOT}/t5_11B/checkpoint_1000000",
}
T5_VOCABULARY = "gs://t5-data/vocabs/cc_all.32000/sentencepiece.model"
EVAL_TASKS = {"ende": "wmt_t2t_ende", "cnndm": "cnn_dailymail"}
CHECKPOINT_FORMATS = ("t5x", "hf")
SOURCES = ("tfds", "tsv", "jsonl", "tfrecord")
BUNDLED_DIR = os.path.join(os.path.dirname(os.path.dirname(__file__)), "bundled")


def _model(preset: str, t5x: str = "", hf: str = "") -> ml_collections.ConfigDict:
  return ml_collections.ConfigDict({"preset": preset, "t5x": t5x, "hf": hf})


def base_config() -> ml_collections.ConfigDict:
  """Every field, with neutral defaults (0 / "" mean "the task's default")."""
  return ml_collections.ConfigDict(
    {
      "name": "eval",
      "task": "wmt_t2t_ende",
      "source": "tfds",  # tfds | tsv | jsonl | tfrecord
      "data_dir": "",  # TFDS data_dir (local or gs://)
      "data_files": "",  # path or glob of the split, for tsv/jsonl/tfrecord
      "tfds_name": "",  # overrides the task's TFDS name:version
      "split": "test",
      "input_length": 0,  # 0: the task's
      "target_length": 0,  # 0: the task's
      "max_new_tokens": 0,  # 0: the target length
      "max_examples": -1,  # -1: the whole split
      "vocabulary": T5_VOCABULARY,
      "checkpoint_format": "t5x",  # t5x | hf: which path of target/draft is used
      "target": _model("t5-11b", T5X_CHECKPOINTS["t5-11b"]),
      "draft": _model("t5-small", T5X_CHECKPOINTS["t5-small"]),
      "dtype": "bfloat16",
      "mesh": "",  # e.g. "data=1,model=4"; "" = one device
      "gamma": 4,
      "temperature": 0.0,
      "verification": "token",  # token | block
      "batch_size": 1,
      "seed": 0,
      "cost_repeats": 10,  # timed runs per model step when measuring c and r
      "bootstrap_samples": 200,
      "paper_row": "",  # key into specsample.eval.paper.TABLE2
      "workdir": "",  # "" = out/eval/<name>
    }
  )


def table2_config(task: str, draft: str, temperature: float) -> ml_collections.ConfigDict:
  """One row of Table 2: T5-XXL (original T5 11B) target, `draft` T5 1.0, the paper's gamma."""
  key = row_key(task, draft, temperature)
  if key not in TABLE2:
    raise ConfigError(f"no Table 2 row {key!r}: tasks {TASKS}, drafts {DRAFTS}, T 0 or 1")
  config = base_config()
  config.name = f"table2_{task}_{draft}_t{temperature:g}"
  config.task = EVAL_TASKS[task]
  config.draft = _model(draft, T5X_CHECKPOINTS[draft])
  config.gamma = TABLE2[key].gamma
  config.temperature = float(temperature)
  config.paper_row = key
  return config


MINIATURES = {
  # task, bundled pair directory, test file, source
  "ende": ("gettext_ende", "ende", "test.tsv", "tsv"),
  "docstrings": ("docstrings", "docstrings", "test.jsonl", "jsonl"),
}


def miniature_config(task: str) -> ml_collections.ConfigDict:
  """The offline miniature: a bundled pair on its shipped test split, on this machine."""
  if task not in MINIATURES:
    raise ConfigError(f"unknown miniature {task!r}; known: {sorted(MINIATURES)}")
  task_name, pair, test_file, source = MINIATURES[task]
  directory = os.path.join(BUNDLED_DIR, pair)
  config = base_config()
  config.name = f"miniature_{task}"
  config.task = task_name
  config.source = source
  config.data_files = os.path.join(directory, test_file)
  config.vocabulary = os.path.join(directory, "spiece.model")
  config.checkpoint_format = "hf"
  config.target = _model("", hf=os.path.join(directory, "target"))
  config.draft = _model("", hf=os.path.join(directory, "draft"))
  config.dtype = "float32"
  config.gamma = 3
  config.cost_repeats = 20
  return config


@dataclasses.dataclass(frozen=True)
class ModelPlan:
  role: str  # "target" or "draft"
  path: str
  preset: str  # "" when the architecture comes from the checkpoint directory
  config: object  # specsample.models.t5.T5Config

  @property
  def parameters(self) -> int:
    return self.config.num_parameters


@dataclasses.dataclass(frozen=True)
class Pipeline:
  """A checked config: everything `run_eval` needs, before any weight or data is read."""

  name: str
  task: object  # specsample.data.tasks.TaskSpec (lengths resolved)
  source: str
  files: dict  # {split: pattern} for local sources, {} for tfds
  data_dir: str
  split: str
  max_examples: int | None
  max_new_tokens: int
  vocabulary: str
  target: ModelPlan
  draft: ModelPlan
  dtype: str
  mesh: dict  # {"data": n, "model": m} or {}
  gamma: int
  temperature: float
  verification: str
  batch_size: int
  seed: int
  cost_repeats: int
  bootstrap_samples: int
  paper_row: object  # PaperRow or None
  workdir: str

  def fingerprint(self) -> str:
    """A hash of everything that changes the per-example results (not workdir, not
    bootstrap or cost settings): a resumed eval must match it."""
    keys = {
      "task": dataclasses.asdict(self.task), "source": self.source, "files": self.files,
      "split": self.split, "max_new_tokens": self.max_new_tokens, "vocabulary": self.vocabulary,
      "target": self.target.path, "draft": self.draft.path, "dtype": self.dtype,
      "gamma": self.gamma, "temperature": self.temperature, "verification": self.verification,
      "batch_size": self.batch_size, "seed": self.seed,
    }  # fmt: skip
    return hashlib.sha256(json.dumps(keys, sort_keys=True).encode()).hexdigest()[:16]

  def speculative_settings(self):
    """The decoding settings of the speculative side (`specsample.SpeculativeSettings`)."""
    from specsample.core.sampling import SamplingConfig
    from specsample.decoding import SpeculativeSettings

    return SpeculativeSettings.of(
      gamma=self.gamma,
      max_new_tokens=self.max_new_tokens,
      sampling=SamplingConfig(temperature=self.temperature),
      verification=self.verification,
    )

  def checkpoints(self) -> dict[str, dict[str, str]]:
    """{role: {"path", "contents"}} of the two checkpoints: `contents` hashes their files'
    names, sizes and mtimes (store.checkpoint_fingerprint), so a checkpoint replaced at the
    same path is not mixed into a resumed eval. Raises ConfigError for a missing path."""
    from specsample.eval.store import checkpoint_fingerprint

    checkpoints = {}
    for plan in (self.target, self.draft):
      try:
        contents = checkpoint_fingerprint(plan.path)
      except FileNotFoundError as error:
        raise ConfigError(
          f"{plan.role} checkpoint {plan.path}: no such file or directory"
        ) from error
      checkpoints[plan.role] = {"path": plan.path, "contents": contents}
    return checkpoints

  def describe(self) -> dict:
    """The settings as plain data (for reports and dry runs)."""
    out = {}
    for field in dataclasses.fields(self):
      value = getattr(self, field.name)
      if isinstance(value, ModelPlan):
        value = {"path": value.path, "preset": value.preset, "parameters": value.parameters}
      elif dataclasses.is_dataclass(value):
        value = dataclasses.asdict(value)
      out[field.name] = value
    return out


def _parse_mesh(text: str) -> dict:
  if not text:
    return {}
  from specsample.scaling import parse_mesh

  return parse_mesh(text)


def _model_plan(role: str, model: ml_collections.ConfigDict, fmt: str) -> ModelPlan:
  from specsample.checkpoints.huggingface import read_hf_config
  from specsample.models.t5 import preset

  path = model.get(fmt, "")
  if not path:
    raise ValueError(
      f"{role}: no {fmt} checkpoint path; set --config.{role}.{fmt}=PATH "
      f"(or --config.checkpoint_format={'hf' if fmt == 't5x' else 't5x'})"
    )
  if model.preset:
    architecture = preset(model.preset)
  elif fmt == "hf":
    if not os.path.isfile(os.path.join(path, "config.json")):
      raise FileNotFoundError(f"{role}: {path} is not a Hugging Face directory (config.json)")
    architecture = read_hf_config(path)
  else:
    raise ValueError(f"{role}: a T5X checkpoint needs --config.{role}.preset (e.g. t5-small)")
  return ModelPlan(role, path, model.preset, architecture)


def _positive(name: str, value, minimum: int = 1) -> int:
  if int(value) != value or value < minimum:
    raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
  return int(value)


def resolve(config: ml_collections.ConfigDict) -> Pipeline:
  """Checks `config` and resolves defaults; raises ConfigError (a ValueError) naming the
  bad field or the missing file."""
  try:
    return _resolve(config)
  except ConfigError:
    raise
  except (ValueError, OSError) as error:  # CheckpointError is a ValueError
    raise ConfigError(str(error)) from error


def _resolve(config: ml_collections.ConfigDict) -> Pipeline:
  from specsample.data import specs

  known = set(base_config().keys())
  unknown = sorted(set(config.keys()) - known)
  if unknown:
    raise ValueError(f"unknown config fields {unknown}; known: {sorted(known)}")
  if config.source not in SOURCES:
    raise ValueError(f"source must be one of {SOURCES}, got {config.source!r}")
  if config.checkpoint_format not in CHECKPOINT_FORMATS:
    raise ValueError(
      f"checkpoint_format must be one of {CHECKPOINT_FORMATS}, got {config.checkpoint_format!r}"
    )
  if config.verification not in ("token", "block"):
    raise ValueError(f"verification must be 'token' or 'block', got {config.verification!r}")
  if config.temperature < 0:
    raise ValueError(f"temperature must be >= 0, got {config.temperature}")
  if config.dtype not in ("float32", "bfloat16"):
    raise ValueError(f"dtype must be float32 or bfloat16, got {config.dtype!r}")
  spec = specs.task_spec(
    config.task,
    input_length=_positive("input_length", config.input_length, 0),
    target_length=_positive("target_length", config.target_length, 0),
    tfds_name=config.tfds_name,
  )
  files = {}
  if config.source == "tfds":
    if not spec.tfds_name:
      raise ValueError(f"task {spec.name} has no TFDS dataset: set source and data_files")
  else:
    if not config.data_files:
      raise ValueError(f"source {config.source!r} needs --config.data_files=PATH_OR_GLOB")
    files = {config.split: config.data_files}
  max_examples = int(config.max_examples)
  pipeline = Pipeline(
    name=config.name,
    task=spec,
    source=config.source,
    files=files,
    data_dir=config.data_dir,
    split=config.split,
    max_examples=None if max_examples < 0 else max_examples,
    max_new_tokens=_positive("max_new_tokens", config.max_new_tokens, 0) or spec.target_length,
    vocabulary=config.vocabulary,
    target=_model_plan("target", config.target, config.checkpoint_format),
    draft=_model_plan("draft", config.draft, config.checkpoint_format),
    dtype=config.dtype,
    mesh=_parse_mesh(config.mesh),
    gamma=_positive("gamma", config.gamma),
    temperature=float(config.temperature),
    verification=config.verification,
    batch_size=_positive("batch_size", config.batch_size),
    seed=int(config.seed),
    cost_repeats=_positive("cost_repeats", config.cost_repeats),
    bootstrap_samples=_positive("bootstrap_samples", config.bootstrap_samples),
    paper_row=paper_row(config.paper_row),
    workdir=config.workdir or os.path.join("out", "eval", config.name),
  )
  pipeline.speculative_settings()  # gamma (1..64), a finite temperature: as decoding checks
  return pipeline
