"""The eval's results file (resume, repair) and checkpoint fingerprints; no TensorFlow."""

from __future__ import annotations

import json
import logging
import os
import pathlib
import shutil

import pytest

from specsample.bundled import BUNDLE_DIR
from specsample.eval import runner
from specsample.eval.configs import base_config, resolve
from specsample.eval.errors import ConfigError
from specsample.eval.store import ResultStore, StoreMismatchError, checkpoint_fingerprint

CHECKPOINTS = {"target": {"path": "t", "contents": "1"}, "draft": {"path": "d", "contents": "2"}}


def record(index: int, value: str = "x") -> dict:
  return {"index": index, "output": value}


def write_file(path, lines: list[str], header: dict | None = None) -> None:
  header = header or {"fingerprint": "abc", "checkpoints": CHECKPOINTS}
  path.write_text("".join(line + "\n" for line in [json.dumps(header), *lines]))


def store_at(path, **kwargs) -> ResultStore:
  return ResultStore(path, "abc", kwargs.pop("checkpoints", CHECKPOINTS), **kwargs)


def resume(store: ResultStore, examples: int) -> None:
  """What run_eval does with the file: load, decode the examples not in it, append them."""
  done = store.load()
  store.append([record(i, "redone") for i in range(examples) if i not in done])


def test_a_corrupt_middle_line_is_dropped_and_the_file_stops_growing(tmp_path, caplog):
  # The reported case: 30 examples, the line of example 5 garbled (newline kept); every
  # rerun re-decoded and appended examples 5..29 again (31 -> 56 -> 81 lines).
  path = tmp_path / "examples.jsonl"
  lines = [json.dumps(record(i)) for i in range(30)]
  lines[5] = '{"index": 5, "outp#\x00garbage'
  write_file(path, lines)
  store = store_at(path)
  with caplog.at_level(logging.WARNING):
    done = store.load()
  assert sorted(done) == [i for i in range(30) if i != 5]
  assert all(done[i] == record(i) for i in done)
  # Rewritten at once without the corrupt line (line 7 of the file), the rest as written.
  assert path.read_text().splitlines() == [path.read_text().splitlines()[0], *lines[:5], *lines[6:]]
  assert "corrupt line(s) 7" in caplog.text and str(path) in caplog.text
  for _ in range(3):
    resume(store_at(path), 30)
    assert len(path.read_text().splitlines()) == 31
  final = store_at(path).load()
  assert sorted(final) == list(range(30)) and final[5] == record(5, "redone")
  assert final[6] == record(6)  # the records after the corrupt line were not redone


def test_records_repeated_in_a_file_are_kept_once(tmp_path, caplog):
  path = tmp_path / "examples.jsonl"
  lines = [json.dumps(r) for r in (record(0), record(1), record(2), record(1, "b"), record(2, "c"))]
  write_file(path, lines)
  with caplog.at_level(logging.WARNING):
    done = store_at(path).load()
  assert done == {0: record(0), 1: record(1), 2: record(2)}
  assert len(path.read_text().splitlines()) == 1 + 3
  assert "line(s) 5, 6 repeating examples" in caplog.text
  # Appending an example that is already there is refused, not written twice.
  store = store_at(path)
  with pytest.raises(ValueError, match="example 1 is already in"):
    store.append([record(3), record(1)])
  with pytest.raises(ValueError, match="example 4 is already in"):
    store.append([record(4), record(4)])
  assert len(path.read_text().splitlines()) == 1 + 3


@pytest.mark.parametrize(
  "bad",
  [
    "not json",
    "[1, 2]",
    '{"index": "3", "output": "x"}',
    '{"output": "x"}',
    '{"index": 3}',
    '{"index": true, "output": "x"}',
  ],
)
def test_lines_that_are_not_records_are_corrupt(tmp_path, bad):
  path = tmp_path / "examples.jsonl"
  write_file(path, [json.dumps(record(0)), bad, json.dumps(record(1))])
  # `fields`: the keys every record has ({"index": 3} lacks "output").
  done = store_at(path, fields=("index", "output")).load()
  assert done == {0: record(0), 1: record(1)}
  assert len(path.read_text().splitlines()) == 1 + 2


def test_a_half_written_last_line_is_still_cut_and_redone(tmp_path, caplog):
  path = tmp_path / "examples.jsonl"
  write_file(path, [json.dumps(record(0)), json.dumps(record(1))])
  with open(path, "a") as f:
    f.write('{"index": 2, "out')  # killed mid-write
  before = path.read_bytes()
  with caplog.at_level(logging.WARNING):
    assert sorted(store_at(path).load()) == [0, 1]
  assert path.read_bytes() == before and "repaired" not in caplog.text  # nothing to repair
  resume(store_at(path), 3)
  assert store_at(path).load() == {0: record(0), 1: record(1), 2: record(2, "redone")}
  assert len(path.read_text().splitlines()) == 4


def test_a_corrupt_line_and_a_half_written_last_line_together(tmp_path):
  path = tmp_path / "examples.jsonl"
  write_file(path, [json.dumps(record(0)), "garbage", json.dumps(record(2))])
  with open(path, "a") as f:
    f.write('{"index": 3, "out')
  assert sorted(store_at(path).load()) == [0, 2]
  assert path.read_text().endswith(json.dumps(record(2)) + "\n")  # the cut line went too
  resume(store_at(path), 4)
  assert sorted(store_at(path).load()) == [0, 1, 2, 3]
  assert len(path.read_text().splitlines()) == 5


def test_a_last_record_without_its_newline_is_kept(tmp_path):
  path = tmp_path / "examples.jsonl"
  write_file(path, [json.dumps(record(0))])
  with open(path, "a") as f:
    f.write(json.dumps(record(1)))  # killed between the record and its newline
  store = store_at(path)
  assert sorted(store.load()) == [0, 1]
  store.append([record(2)])
  assert store_at(path).load() == {0: record(0), 1: record(1), 2: record(2)}


def test_a_header_cut_short_starts_over_and_a_corrupt_header_is_refused(tmp_path):
  path = tmp_path / "examples.jsonl"
  path.write_text('{"fingerpr')  # killed while writing the first line
  store = store_at(path)
  assert store.load() == {}
  store.append([record(0)])
  assert store_at(path).load() == {0: record(0)}
  path.write_text("garbage\n" + json.dumps(record(0)) + "\n")
  with pytest.raises(StoreMismatchError, match="first line is not a results header"):
    store_at(path).load()


def test_a_failed_rewrite_leaves_the_file_as_it_was(tmp_path, monkeypatch):
  path = tmp_path / "examples.jsonl"
  write_file(path, [json.dumps(record(0)), "garbage", json.dumps(record(2))])
  before = path.read_bytes()

  def crash(source, destination):
    raise OSError("disk full")

  monkeypatch.setattr(os, "replace", crash)
  with pytest.raises(OSError, match="disk full"):
    store_at(path).load()
  assert path.read_bytes() == before
  assert [p.name for p in tmp_path.iterdir()] == ["examples.jsonl"]  # no temp file left


def test_checkpoint_fingerprint_follows_names_sizes_and_mtimes(tmp_path):
  checkpoint = tmp_path / "checkpoint"
  (checkpoint / "state").mkdir(parents=True)
  (checkpoint / "checkpoint").write_bytes(b"a" * 10)
  (checkpoint / "state" / "0.0").write_bytes(b"b" * 10)
  base = checkpoint_fingerprint(str(checkpoint))
  assert checkpoint_fingerprint(str(checkpoint) + "/") == base
  copy = tmp_path / "copy"
  shutil.copytree(checkpoint, copy, copy_function=shutil.copy2)  # same names, sizes, mtimes
  assert checkpoint_fingerprint(str(copy)) == base

  nested = checkpoint / "state" / "0.0"
  stat = nested.stat()
  os.utime(nested, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1))  # a file rewritten
  touched = checkpoint_fingerprint(str(checkpoint))
  assert touched != base
  nested.write_bytes(b"b" * 11)
  os.utime(nested, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1))
  assert checkpoint_fingerprint(str(checkpoint)) not in (base, touched)  # a size changed
  (checkpoint / "state" / "0.0").rename(checkpoint / "state" / "0.1")
  assert checkpoint_fingerprint(str(checkpoint)) not in (base, touched)

  single = tmp_path / "checkpoint.msgpack"
  single.write_bytes(b"c")
  assert checkpoint_fingerprint(str(single)) != checkpoint_fingerprint(str(copy))
  # gs://: the path only (nothing is listed).
  assert checkpoint_fingerprint("gs://b/x") == checkpoint_fingerprint("gs://b/x/")
  assert checkpoint_fingerprint("gs://b/x") != checkpoint_fingerprint("gs://b/y")
  with pytest.raises(FileNotFoundError, match="no such file"):
    checkpoint_fingerprint(str(tmp_path / "missing"))


@pytest.mark.parametrize("role", ["target", "draft"])
def test_a_changed_checkpoint_is_refused_naming_it(tmp_path, role):
  path = tmp_path / "examples.jsonl"
  store_at(path).append([record(0)])
  changed = {**CHECKPOINTS, role: {**CHECKPOINTS[role], "contents": "other"}}
  with pytest.raises(
    StoreMismatchError, match=rf"the {role} checkpoint \({changed[role]['path']}\) changed"
  ):
    store_at(path, checkpoints=changed).load()
  assert store_at(path).load() == {0: record(0)}


def test_a_file_from_before_checkpoint_fingerprints_records_them(tmp_path, caplog):
  path = tmp_path / "examples.jsonl"
  write_file(path, [json.dumps(record(0))], header={"fingerprint": "abc"})
  with caplog.at_level(logging.WARNING):
    assert store_at(path).load() == {0: record(0)}
  assert "before checkpoint contents were recorded" in caplog.text
  assert json.loads(path.read_text().splitlines()[0]) == {
    "fingerprint": "abc", "checkpoints": CHECKPOINTS,
  }  # fmt: skip
  with pytest.raises(StoreMismatchError, match="target checkpoint"):
    store_at(path, checkpoints={**CHECKPOINTS, "target": {"path": "t", "contents": "3"}}).load()


@pytest.fixture
def hf_dirs(tmp_path):
  """Two Hugging Face directories resolve() accepts (config.json + a stand-in weight file)."""
  dirs = []
  for role in ("target", "draft"):
    directory = tmp_path / role
    directory.mkdir()
    shutil.copy(BUNDLE_DIR / role / "config.json", directory / "config.json")
    (directory / "model.safetensors").write_bytes(b"weights")
    dirs.append(directory)
  return dirs


def tsv_pipeline(hf_dirs, workdir):
  config = base_config()
  config.update(task="gettext_ende", source="tsv", data_files="unused.tsv", dtype="float32")
  config.vocabulary, config.checkpoint_format = str(BUNDLE_DIR / "spiece.model"), "hf"
  config.target.preset = config.draft.preset = ""
  config.target.hf, config.draft.hf = map(str, hf_dirs)
  config.workdir = str(workdir)
  return resolve(config)


def test_run_eval_refuses_a_checkpoint_replaced_at_the_same_path(hf_dirs, tmp_path, monkeypatch):
  pipeline = tsv_pipeline(hf_dirs, tmp_path / "work")
  runner.open_store(pipeline).append([{field: 0 for field in runner.RECORD_FIELDS}])
  assert pipeline.fingerprint() == tsv_pipeline(hf_dirs, tmp_path / "work").fingerprint()
  weights = hf_dirs[0] / "model.safetensors"
  weights.write_bytes(b"other weights")  # another target, same path
  os.utime(weights, ns=(1, 10**18))

  def no_data(pipeline):
    raise AssertionError("the data was read before the checkpoints were checked")

  monkeypatch.setattr(runner, "make_task", no_data)
  with pytest.raises(StoreMismatchError, match=r"the target checkpoint \(.*target\) changed"):
    runner.run_eval(pipeline, show_progress=False)
  # The file was not touched; a missing checkpoint is a config error too.
  assert len((tmp_path / "work" / "examples.jsonl").read_text().splitlines()) == 2
  shutil.rmtree(hf_dirs[1])
  with pytest.raises(ConfigError, match=r"draft checkpoint .*draft: no such file"):
    runner.run_eval(pipeline, show_progress=False)


def test_pipeline_checkpoints_change_with_the_files_not_the_workdir(hf_dirs, tmp_path):
  first = tsv_pipeline(hf_dirs, tmp_path / "a").checkpoints()
  assert first == tsv_pipeline(hf_dirs, tmp_path / "b").checkpoints()
  assert first["target"]["path"] == str(hf_dirs[0])
  (pathlib.Path(hf_dirs[1]) / "model.safetensors").write_bytes(b"other")
  second = tsv_pipeline(hf_dirs, tmp_path / "a").checkpoints()
  assert second["target"] == first["target"] and second["draft"] != first["draft"]
