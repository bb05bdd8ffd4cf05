"""Every notebook runs top to bottom (code cells in order, shell and magic lines skipped),
each in a process of its own (tests/notebook_runner.py)."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

RUNNER = pathlib.Path(__file__).parent / "notebook_runner.py"
NOTEBOOKS = sorted((pathlib.Path(__file__).parent.parent / "notebooks").glob("*.ipynb"))


def test_there_are_notebooks():
  assert NOTEBOOKS


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs(path):
  notebook = json.loads(path.read_text())
  for module in notebook["metadata"].get("specsample_requires", []):
    pytest.importorskip(module)  # an optional extra (CI installs them all)
  result = subprocess.run(
    [sys.executable, str(RUNNER), str(path)],
    cwd=path.parent.parent,
    capture_output=True,
    text=True,
  )
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
