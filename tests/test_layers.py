"""The layering of design.md: imports point downwards only.

core (pure math) <- decoding (the loops) ; core, kernels <- models (behind the contract);
files (whole-or-nothing writes) and progress (the progress bar of long work) sit at the
bottom beside core, for every layer that writes or runs long;
checkpoints, scaling, data, train, bench, bundled, pairs, eval sit on top; cli and the top-level
API at the very top. Every `import specsample.X` in a package's files counts, including
the ones inside functions (a lazy import is still a dependency).
"""

from __future__ import annotations

import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).parents[1] / "specsample"
# The layers that train and eval both build on (ALLOWED adds each one's others).
BELOW_TRAIN_AND_EVAL = {
  "files",
  "progress",
  "core",
  "decoding",
  "kernels",
  "models",
  "checkpoints",
  "data",
}
ALLOWED = {
  "core": set(),
  "files": set(),
  "progress": set(),
  "kernels": set(),
  "decoding": {"core", "kernels"},
  "models": {"core", "kernels"},
  "checkpoints": {"files", "core", "kernels", "models"},
  "scaling": {"core", "decoding", "kernels", "models", "checkpoints"},
  "data": {"files"},
  "train": BELOW_TRAIN_AND_EVAL | {"bundled"},
  "bench": {"files", "core", "decoding", "kernels", "models"},
  "bundled": {"files", "core", "kernels", "models", "checkpoints"},
  "eval": BELOW_TRAIN_AND_EVAL | {"scaling", "bench", "pairs"},
  "api": {"core", "decoding", "bench"},
  "pairs": {
    "core",
    "kernels",
    "models",
    "checkpoints",
    "bundled",
    "scaling",
    "draft_loader",
    "pair_arithmetic",
  },
  "draft_loader": {"models", "checkpoints", "bundled"},  # a draft by name, for pairs
  "pair_arithmetic": {"checkpoints", "kernels"},  # weights and activations, for pairs
}
TOP = {"cli", "__init__", "__main__", "entry"}  # may import anything


def imported_layers(path: pathlib.Path) -> set[str]:
  layers = set()
  for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
    if isinstance(node, ast.Import):
      modules = [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
      modules = [node.module]
      if node.module == "specsample":  # from specsample import bench
        modules += [f"specsample.{alias.name}" for alias in node.names]
    else:
      continue
    layers.update(m.split(".")[1] for m in modules if m.startswith("specsample."))
  return layers


def layer_of(path: pathlib.Path) -> str:
  return path.relative_to(PACKAGE).parts[0].removesuffix(".py")


FILES = sorted(PACKAGE.rglob("*.py"))


def test_every_layer_is_known():
  assert {layer_of(f) for f in FILES} <= set(ALLOWED) | TOP


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_point_downwards(path):
  layer = layer_of(path)
  if layer in TOP:
    return
  above = imported_layers(path) - ALLOWED[layer] - {layer}
  assert not above, f"{path.relative_to(PACKAGE)} ({layer}) imports {sorted(above)}"


def test_the_checker_sees_violations(tmp_path):
  bad = tmp_path / "bad.py"
  bad.write_text("def f():\n  from specsample.bench import timing\nimport specsample.cli.main\n")
  assert imported_layers(bad) == {"bench", "cli"}
