"""Runs one notebook's code cells in order (shell and magic lines skipped).

  python tests/notebook_runner.py notebooks/quickstart.ipynb

A separate process per notebook: a notebook may load TensorFlow (seqio), which must not
share a process with the rest of the test suite (see conftest.py).
"""

from __future__ import annotations

import json
import pathlib
import sys


def run(path: pathlib.Path) -> None:
  notebook = json.loads(path.read_text())
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


if __name__ == "__main__":
  run(pathlib.Path(sys.argv[1]))
