"""scripts/accelerator_check.py runs unchanged on a CPU with tiny shapes: the table, the
JSON and every number it reports."""

from __future__ import annotations

import json
import math

import pytest

from specsample.cli import accelerator_check as check


def test_accelerator_check_runs_on_cpu_with_tiny_shapes(tmp_path, capsys):
  out = tmp_path / "check.json"
  argv = ["--tiny", "--batches", "2", "--prompt-length", "8", "--max-new-tokens", "8"]
  argv += ["--repeats", "1"]
  assert check.main([*argv, "--out", str(out)]) == 0
  printed = capsys.readouterr().out
  assert printed.splitlines()[0] == check.HEADER
  report = json.loads(out.read_text())
  assert report["device"].startswith("cpu") and report["dtype"] == "bfloat16"
  rows = report["rows"]
  assert [(r["pair"], r["batch"]) for r in rows] == [("tiny t5", 2), ("tiny decoder-only", 2)]
  for row in rows:
    for key in ("t_target_1_ms", "r", "c", "measured_speedup", "predicted_speedup"):
      assert math.isfinite(row[key]) and row[key] > 0, (key, row)
    assert math.isclose(row["efficiency"], row["measured_speedup"] / row["predicted_speedup"])
    assert 0 <= row["alpha"] <= 1 and row["tokens_per_target_call"] >= 1
    assert row["pair"] in printed


def test_accelerator_check_refuses_to_overwrite(tmp_path):
  out = tmp_path / "check.json"
  out.write_text("{}")
  with pytest.raises(SystemExit):
    check.main(["--tiny", "--out", str(out)])
  assert out.read_text() == "{}"
