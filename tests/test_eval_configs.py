"""The 12 Table 2 configs and the miniature configs resolve into checked pipelines."""

from __future__ import annotations

import importlib.util
import json
import pathlib
import subprocess
import sys

import pytest

from specsample.eval.configs import resolve

ROOT = pathlib.Path(__file__).resolve().parents[1]
# Table 2 of Leviathan et al. 2023, copied from the paper: (task, draft, T) -> gamma.
PAPER_GAMMAS = {
  ("ende", "small", 0): 7, ("ende", "base", 0): 7, ("ende", "large", 0): 7,
  ("ende", "small", 1): 7, ("ende", "base", 1): 5, ("ende", "large", 1): 3,
  ("cnndm", "small", 0): 5, ("cnndm", "base", 0): 5, ("cnndm", "large", 0): 3,
  ("cnndm", "small", 1): 5, ("cnndm", "base", 1): 3, ("cnndm", "large", 1): 3,
}  # fmt: skip
# Parameter counts of the original T5 checkpoints (as Hugging Face reports them).
PARAMETERS = {"small": 60_506_624, "base": 222_903_552, "large": 737_668_096}
T5_11B = 11_307_321_344


def load_config(path: pathlib.Path):
  spec = importlib.util.spec_from_file_location(path.stem, path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config()


def test_there_is_one_config_per_table_row():
  names = sorted(p.stem for p in (ROOT / "configs" / "table2").glob("*.py"))
  assert names == sorted(f"{t}_t5_{d}_t{T}" for t, d, T in PAPER_GAMMAS)


@pytest.mark.parametrize(("task", "draft", "temperature"), sorted(PAPER_GAMMAS))
def test_table2_config_resolves(task, draft, temperature):
  config = load_config(ROOT / "configs" / "table2" / f"{task}_t5_{draft}_t{temperature}.py")
  pipeline = resolve(config)
  assert pipeline.gamma == PAPER_GAMMAS[task, draft, temperature]
  assert pipeline.temperature == temperature
  assert pipeline.task.name == {"ende": "wmt_t2t_ende", "cnndm": "cnn_dailymail"}[task]
  assert (
    pipeline.task.prefix == {"ende": "translate English to German: ", "cnndm": "summarize: "}[task]
  )
  assert pipeline.task.input_length == pipeline.task.target_length == 512
  assert pipeline.source == "tfds" and pipeline.split == "test"
  assert pipeline.target.parameters == T5_11B
  assert pipeline.draft.parameters == PARAMETERS[draft]
  assert pipeline.target.path == "gs://t5-data/pretrained_models/t5x/t5_11B/checkpoint_1000000"
  assert pipeline.draft.path.endswith(f"/t5_{draft}/checkpoint_1000000")
  assert pipeline.vocabulary == "gs://t5-data/vocabs/cc_all.32000/sentencepiece.model"
  assert pipeline.paper_row.gamma == pipeline.gamma
  assert pipeline.workdir == f"out/eval/table2_{task}_t5-{draft}_t{temperature}"


def test_hugging_face_paths_are_used_when_asked(tmp_path):
  config = load_config(ROOT / "configs" / "table2" / "ende_t5_base_t1.py")
  config.checkpoint_format = "hf"
  with pytest.raises(ValueError, match=r"target: no hf checkpoint path; set --config.target.hf"):
    resolve(config)
  config.target.hf, config.draft.hf = "/models/t5-11b", "/models/t5-base"
  pipeline = resolve(config)
  assert (pipeline.target.path, pipeline.draft.path) == ("/models/t5-11b", "/models/t5-base")
  assert pipeline.draft.parameters == PARAMETERS["base"]


@pytest.mark.parametrize(
  ("field", "value", "message"),
  [
    ("gamma", 0, "gamma must be an integer >= 1"),
    ("temperature", -1.0, "temperature must be >= 0"),
    ("source", "csv", "source must be one of"),
    ("verification", "greedy", "verification must be"),
    ("task", "xsum", "unknown task"),
    ("paper_row", "ende/t5-3b/t0", "unknown paper row"),
  ],
)
def test_bad_fields_are_named(field, value, message):
  config = load_config(ROOT / "configs" / "table2" / "cnndm_t5_small_t0.py")
  config[field] = value
  with pytest.raises(ValueError, match=message):
    resolve(config)


def test_local_sources_need_files():
  config = load_config(ROOT / "configs" / "table2" / "cnndm_t5_small_t0.py")
  config.source = "jsonl"
  with pytest.raises(ValueError, match="needs --config.data_files"):
    resolve(config)


@pytest.mark.parametrize("name", ["ende", "docstrings"])
def test_miniature_configs_point_at_shipped_files(name):
  pipeline = resolve(load_config(ROOT / "configs" / f"miniature_{name}.py"))
  for path in (pipeline.vocabulary, *pipeline.files.values()):
    assert pathlib.Path(path).is_file(), path
  assert pipeline.target.parameters > pipeline.draft.parameters > 0
  assert pipeline.source in ("tsv", "jsonl")


def test_fingerprint_changes_with_what_changes_results():
  config = load_config(ROOT / "configs" / "table2" / "ende_t5_small_t0.py")
  base = resolve(config).fingerprint()
  config.workdir, config.bootstrap_samples = "elsewhere", 10
  assert resolve(config).fingerprint() == base
  config.gamma = 3
  assert resolve(config).fingerprint() != base


@pytest.mark.slow
def test_eval_script_dry_run_builds_the_seqio_task_with_overrides():
  pytest.importorskip("seqio")  # the eval extra; installed in CI
  result = subprocess.run(
    [
      sys.executable,
      str(ROOT / "scripts" / "eval.py"),
      f"--config={ROOT / 'configs' / 'table2' / 'cnndm_t5_large_t1.py'}",
      "--config.gamma=2",
      "--config.max_examples=10",
      "--config.data_dir=gs://bucket/tfds",
      "--dry_run",
    ],  # fmt: skip
    capture_output=True,
    text=True,
    check=True,
    cwd=ROOT,
  )
  described = json.loads(result.stdout[result.stdout.index("{") :])
  assert described["gamma"] == 2 and described["max_examples"] == 10
  assert described["data_dir"] == "gs://bucket/tfds"
  assert described["seqio_task"] == "cnn_dailymail_tfds"
  assert described["draft"]["parameters"] == PARAMETERS["large"]
  assert described["paper_row"]["speedup"] == 1.7
