"""The eval pipeline end to end, offline: TFDS mock data and local files, tiny models."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

tfds = pytest.importorskip("tensorflow_datasets")  # the seqio extra; installed in CI

from tiny_models import tiny_pair  # noqa: E402

from specsample.bundled import BUNDLE_DIR  # noqa: E402
from specsample.checkpoints import save_hf_t5  # noqa: E402
from specsample.eval.configs import base_config, resolve  # noqa: E402
from specsample.eval.report import REPORT_FIELDS, markdown, summary_table  # noqa: E402
from specsample.eval.runner import bucket_width, run_eval  # noqa: E402
from specsample.eval.store import ResultStore, StoreMismatchError  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
VOCAB = str(BUNDLE_DIR / "spiece.model")


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
  directory = tmp_path_factory.mktemp("models")
  target, draft = tiny_pair(vocab=4000)
  save_hf_t5(target, directory / "target")
  save_hf_t5(draft, directory / "draft")
  return str(directory / "target"), str(directory / "draft")


def make_config(model_dirs, workdir, **fields):
  config = base_config()
  config.vocabulary = VOCAB
  config.checkpoint_format = "hf"
  config.target.preset = config.draft.preset = ""
  config.target.hf, config.draft.hf = model_dirs
  config.dtype = "float32"
  config.input_length, config.max_new_tokens = 32, 8
  config.gamma = 3
  config.cost_repeats, config.bootstrap_samples = 2, 20
  config.workdir = str(workdir)
  config.update(fields)
  return config


def test_bucket_widths():
  assert [bucket_width(n, 512) for n in (1, 8, 9, 100, 512)] == [8, 8, 16, 128, 512]
  assert bucket_width(40, 48) == 48


@pytest.mark.slow
@pytest.mark.parametrize(
  ("task", "paper_row", "metric_key"),
  [("wmt_t2t_ende", "ende/t5-small/t0", "bleu"), ("cnn_dailymail", "", "rouge1")],
)
def test_eval_over_tfds_mock_data(model_dirs, tmp_path, task, paper_row, metric_key):
  config = make_config(model_dirs, tmp_path, task=task, paper_row=paper_row, name=task)
  with tfds.testing.mock_data(num_examples=3, policy=tfds.testing.MockPolicy.USE_CODE):
    raw = list(tfds.load(resolve(config).task.tfds_name, split="test").as_numpy_iterator())
    report = run_eval(resolve(config), show_progress=False)
  assert set(REPORT_FIELDS) <= set(report)
  assert report["examples"] == 3 and report["task"] == task
  # Greedy: speculative decoding gives the target's outputs exactly.
  assert report["identical_outputs"] == 1.0
  quality = report["quality"]
  assert quality["target"][metric_key] == quality["speculative"][metric_key]
  assert quality["difference_ci95"][metric_key]["difference"] == 0.0
  assert 0.0 <= report["alpha"] <= 1.0 and 1.0 <= report["tokens_per_target_call"] <= 4.0
  assert report["c"] > 0 and report["r"] > 0 and report["speedup"] > 0
  assert report["settings"]["gamma"] == 3
  saved = json.loads((tmp_path / "report.json").read_text())
  assert saved["alpha"] == report["alpha"]
  text = (tmp_path / "report.md").read_text()
  assert ("| paper: EnDe" in text) == bool(paper_row)
  records = [json.loads(line) for line in (tmp_path / "examples.jsonl").read_text().splitlines()]
  source, field = {"wmt_t2t_ende": ("en", "de"), "cnn_dailymail": ("article", "highlights")}[task]
  prefix = {"wmt_t2t_ende": "translate English to German: ", "cnn_dailymail": "summarize: "}[task]
  assert [r["reference"] for r in records[1:]] == [row[field].decode() for row in raw]
  assert [r["input"] for r in records[1:]] == [prefix + row[source].decode() for row in raw]
  if paper_row:
    assert report["paper"]["gamma"] == 7 and report["paper"]["speedup"] == 3.4


@pytest.fixture
def tsv_file(tmp_path):
  path = tmp_path / "test.tsv"
  lines = ["Open file", "Save the document", "Quit", "Could not open %s", "Print", "Undo"]
  path.write_text("".join(f"{line}\tx\n" for line in lines))
  return str(path)


def outputs(workdir):
  lines = (pathlib.Path(workdir) / "examples.jsonl").read_text().splitlines()
  return {
    r["index"]: (r["target_output"], r["speculative_output"]) for r in map(json.loads, lines[1:])
  }


@pytest.mark.slow
def test_interrupted_eval_resumes_and_matches_an_uninterrupted_one(model_dirs, tmp_path, tsv_file):
  fields = dict(task="gettext_ende", source="tsv", data_files=tsv_file, temperature=1.0,
                batch_size=2)  # fmt: skip
  whole_config = make_config(model_dirs, tmp_path / "whole", **fields)
  whole = run_eval(resolve(whole_config), show_progress=False)
  resumed_dir = tmp_path / "resumed"
  pipeline = resolve(make_config(model_dirs, resumed_dir, **fields))
  assert run_eval(pipeline, show_progress=False, stop_after=2) == {}
  first = (resumed_dir / "examples.jsonl").read_text()
  assert len(first.splitlines()) == 1 + 2 and not (resumed_dir / "report.json").exists()
  report = run_eval(pipeline, show_progress=False)
  # The finished examples were kept as written, the rest were added.
  assert (resumed_dir / "examples.jsonl").read_text().startswith(first)
  assert report["examples"] == whole["examples"] == 6
  assert outputs(resumed_dir) == outputs(tmp_path / "whole")
  assert report["alpha"] == whole["alpha"]
  assert report["quality"]["target"] == whole["quality"]["target"]
  # Sampling: outputs are random draws, so the two decoders agree only statistically.
  assert "bleu" in report["quality"]["difference_ci95"]
  assert "| whole" not in summary_table([report]) and report["name"] in summary_table([report])
  assert "Identical outputs" in markdown(report)

  # The same workdir with a setting that changes results is refused, not mixed.
  changed = resolve(make_config(model_dirs, resumed_dir, **{**fields, "gamma": 2}))
  with pytest.raises(StoreMismatchError, match="another configuration"):
    run_eval(changed, show_progress=False)


@pytest.mark.slow
def test_a_corrupt_results_line_is_redone_once_and_nothing_counts_twice(
  model_dirs, tmp_path, tsv_file
):
  # Greedy, batch 1: a redone example gives the same record but for its timings.
  pipeline = resolve(make_config(model_dirs, tmp_path, task="gettext_ende", source="tsv",
                                 data_files=tsv_file))  # fmt: skip
  first = run_eval(pipeline, show_progress=False)
  path = tmp_path / "examples.jsonl"
  original, lines = outputs(tmp_path), path.read_text().splitlines()
  lines[2] = lines[2][:30] + "#"  # example 1's line garbled, its newline kept
  lines.insert(5, lines[4])  # example 3 twice (what the old resume appended)
  path.write_text("\n".join(lines) + "\n")
  report = run_eval(pipeline, show_progress=False)
  assert report["examples"] == 6 and outputs(tmp_path) == original
  assert report["alpha"] == first["alpha"]
  assert report["quality"]["target"] == first["quality"]["target"]
  repaired = path.read_text()
  assert len(repaired.splitlines()) == 1 + 6
  assert [json.loads(line)["index"] for line in repaired.splitlines()[1:]] == [0, 2, 3, 4, 5, 1]
  run_eval(pipeline, show_progress=False)
  assert path.read_text() == repaired  # a rerun decodes nothing and appends nothing


def test_store_drops_a_line_cut_short(tmp_path):
  store = ResultStore(tmp_path / "x.jsonl", "abc")
  store.append([{"index": 0, "v": 1}])
  with open(tmp_path / "x.jsonl", "a") as f:
    f.write('{"index": 1, "v"')  # killed mid-write
  assert list(store.load()) == [0]
  store.append([{"index": 1, "v": 2}])
  assert store.load() == {0: {"index": 0, "v": 1}, 1: {"index": 1, "v": 2}}
  with pytest.raises(StoreMismatchError):
    ResultStore(tmp_path / "x.jsonl", "other").load()


@pytest.mark.slow
@pytest.mark.parametrize(
  ("name", "task", "metric"),
  [("ende", "gettext_ende", "bleu"), ("docstrings", "docstrings", "rougeL")],
)
def test_eval_script_on_the_bundled_miniatures(tmp_path, name, task, metric):
  subprocess.run(
    [
      sys.executable,
      str(ROOT / "scripts" / "eval.py"),
      f"--config={ROOT / 'configs' / f'miniature_{name}.py'}",
      "--config.max_examples=4",
      f"--config.workdir={tmp_path}",
      "--config.cost_repeats=2",
      "--config.bootstrap_samples=10",
      "--quiet",
    ],  # fmt: skip
    check=True,
    cwd=ROOT,
    capture_output=True,
  )
  report = json.loads((tmp_path / "report.json").read_text())
  assert set(REPORT_FIELDS) <= set(report)
  assert report["examples"] == 4 and report["identical_outputs"] == 1.0
  assert report["quality"]["target"][metric] > 0
  assert report["task"] == task and report["paper"] is None
