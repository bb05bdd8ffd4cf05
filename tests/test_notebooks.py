"""Every notebook runs top to bottom (code cells in order, shell and magic lines skipped)."""

from __future__ import annotations

import json
import pathlib

import pytest

NOTEBOOKS = sorted((pathlib.Path(__file__).parent.parent / "notebooks").glob("*.ipynb"))


def test_there_are_notebooks():
  assert NOTEBOOKS


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs(path):
  notebook = json.loads(path.read_text())
  for module in notebook["metadata"].get("specsample_requires", []):
    pytest.importorskip(module)  # an optional extra (CI installs them all)
  namespace: dict = {"__name__": "__notebook__"}
  for number, cell in enumerate(notebook["cells"]):
    if cell["cell_type"] != "code":
      continue
    lines = [
      line
      for line in "".join(cell["source"]).splitlines()
      if not line.lstrip().startswith(("!", "%"))
    ]
    exec(compile("\n".join(lines), f"{path.name}[cell {number}]", "exec"), namespace)  # noqa: S102
