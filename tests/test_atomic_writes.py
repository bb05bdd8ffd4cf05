"""Nothing half-written on a full disk: every writer (specsample.files, the trace, bench
reports, eval reports, checkpoints) leaves the old file whole, no temporary file behind,
and raises the OSError (one line on the command line). Tested on a real full filesystem:
a small tmpfs mounted for the test (as root; where mounting is not permitted the tests
that need it skip, saying so)."""

from __future__ import annotations

import errno
import json
import os
import pathlib
import stat
import subprocess

import pytest

from specsample import files
from specsample.cli.main import main


@pytest.fixture
def disk(tmp_path):
  """A 512 KiB tmpfs; `fill()` takes every byte left."""
  mount = tmp_path / "disk"
  mount.mkdir()
  if os.geteuid() != 0:
    pytest.skip("mounting a tmpfs needs root")
  done = subprocess.run(
    ["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(mount)], capture_output=True
  )
  if done.returncode:
    pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
  try:
    yield Disk(mount)
  finally:
    subprocess.run(["umount", "-l", str(mount)], check=False)


class Disk:
  def __init__(self, root: pathlib.Path):
    self.root = root

  def fill(self) -> None:
    with open(self.root / "filler", "wb", buffering=0) as filler:
      try:
        while True:
          filler.write(b"\0" * 4096)
      except OSError as error:
        assert error.errno == errno.ENOSPC

  def names(self) -> list[str]:
    return sorted(os.listdir(self.root))


def test_write_text_and_file_sets_keep_the_old_files_on_a_full_disk(disk):
  old = disk.root / "report.json"
  old.write_text('{"old": true}\n')
  other = disk.root / "report.md"
  other.write_text("old report\n")
  disk.fill()
  with pytest.raises(OSError) as caught:
    files.write_json(old, {"new": "x" * 100_000})
  assert caught.value.errno == errno.ENOSPC
  assert old.read_text() == '{"old": true}\n'
  with pytest.raises(OSError), files.FileSet(disk.root) as fileset:
    fileset.write_text("report.md", "new report\n")  # small: may fit in a page
    fileset.write_json("report.json", {"new": "x" * 100_000})
  assert other.read_text() == "old report\n" and old.read_text() == '{"old": true}\n'
  assert disk.names() == ["filler", "report.json", "report.md"]  # no temporary file left
  (disk.root / "filler").unlink()
  files.write_json(old, {"new": 1})  # with room, it is replaced
  assert json.loads(old.read_text()) == {"new": 1}


def test_written_files_get_the_usual_permissions(tmp_path):
  files.write_text(tmp_path / "a.txt", "a")
  with files.FileSet(tmp_path) as fileset:
    fileset.write_text("b.txt", "b")
  mask = os.umask(0o022)
  os.umask(mask)
  for name in ("a.txt", "b.txt"):
    assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o666 & ~mask
  assert sorted(os.listdir(tmp_path)) == ["a.txt", "b.txt"]


def test_an_error_inside_a_file_set_changes_nothing(tmp_path):
  (tmp_path / "kept.txt").write_text("old")
  with pytest.raises(RuntimeError), files.FileSet(tmp_path) as fileset:
    fileset.write_text("kept.txt", "new")
    fileset.write_text("fresh.txt", "new")
    raise RuntimeError("the run failed")
  assert os.listdir(tmp_path) == ["kept.txt"] and (tmp_path / "kept.txt").read_text() == "old"


def test_a_trace_over_an_old_one_on_a_full_disk_is_one_line_and_keeps_it(disk, capsys):
  trace = disk.root / "trace.html"
  trace.write_text("<html>old</html>")
  disk.fill()
  argv = ["translate", "Open file", "--max-new-tokens", "6", "--repeats", "1", "--gamma", "2",
          "--trace", str(trace), "--overwrite"]  # fmt: skip
  assert main(argv) == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert "No space left on device" in err[-1] and err[-1].startswith("specsample translate: ")
  assert trace.read_text() == "<html>old</html>"
  assert disk.names() == ["filler", "trace.html"]


def test_bench_plots_and_reports_keep_the_old_set_on_a_full_disk(disk):
  from toy_pairs import toy_pair

  from specsample.bench import output
  from specsample.bench.pair import bench_pair
  from specsample.bench.pair_report import BenchSettings

  target, draft = toy_pair()
  settings = BenchSettings(gammas=(1,), batch_sizes=(1,), max_new_tokens=4, repeats=1,
                           cost_repeats=1, phase_prompts=1)  # fmt: skip
  report = bench_pair(target, draft, [[1, 2], [3]], settings)
  names = ["speedup_vs_gamma.png", "acceptance_histogram.png", "batch_scaling.png"]
  for name in names:
    (disk.root / name).write_bytes(b"old png")
  disk.fill()
  with pytest.raises(OSError):
    output.plot(report, disk.root, title="toy")
  assert all((disk.root / name).read_bytes() == b"old png" for name in names)
  assert disk.names() == sorted(["filler", *names])


def test_a_checkpoint_and_an_eval_report_keep_their_old_files_on_a_full_disk(disk):
  from specsample.checkpoints.decoder_only import save_hf_decoder_only
  from specsample.eval.report import write_report
  from specsample.models.decoder_only import DecoderOnly, DecoderOnlyConfig

  config = DecoderOnlyConfig(
    vocab_size=512, d_model=64, num_heads=2, num_kv_heads=1, head_dim=32, mlp_dim=128,
    num_layers=2, tie_word_embeddings=True,
  )  # fmt: skip
  checkpoint = disk.root / "model"
  checkpoint.mkdir()
  (checkpoint / "config.json").write_text('{"old": 1}')
  (checkpoint / "model.safetensors").write_bytes(b"old weights")
  (disk.root / "report.json").write_text("old")
  disk.fill()
  with pytest.raises(OSError):
    save_hf_decoder_only(DecoderOnly.init_random(config, seed=0), checkpoint)
  assert (checkpoint / "config.json").read_text() == '{"old": 1}'
  assert (checkpoint / "model.safetensors").read_bytes() == b"old weights"
  assert sorted(os.listdir(checkpoint)) == ["config.json", "model.safetensors"]
  with pytest.raises(OSError):
    write_report({"big": "x" * 200_000}, str(disk.root))
  assert (disk.root / "report.json").read_text() == "old"
  assert disk.names() == ["filler", "model", "report.json"]
