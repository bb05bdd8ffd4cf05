"""The offline miniature of Table 2: the eval pipeline over both bundled pairs.

Runs `scripts/eval.py`'s pipeline (seqio task over the shipped test file, target alone vs
speculative, BLEU or ROUGE, alpha, c, r, speedup) for every task x temperature x gamma
of the grid, one workdir each under --out (resumable like any eval), then writes the
combined table to --out/table.md and prints it.

  python scripts/miniature.py --out out/miniature [--gammas 2 3 5] [--max-examples 100]

Every run of the grid is checked before the first starts. Exit codes as scripts/eval.py:
2 a config error (one line on stderr), 130 interrupted (rerunning resumes).
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence

from specsample.eval.errors import ConfigError, examples_path, require_modules, run_command

PROG = "miniature.py"


class _Parser(argparse.ArgumentParser):
  def error(self, message: str):  # one line, like every other config error
    raise ConfigError(message)


def _parser() -> argparse.ArgumentParser:
  parser = _Parser(prog=PROG, description=__doc__.split("\n\n")[0])
  parser.add_argument("--out", default="out/miniature")
  parser.add_argument("--tasks", nargs="+", default=["ende", "docstrings"])
  parser.add_argument("--temperatures", nargs="+", type=float, default=[0.0, 1.0])
  parser.add_argument("--gammas", nargs="+", type=int, default=[2, 3, 5])
  parser.add_argument("--max-examples", type=int, default=-1, help="-1: the whole test split")
  parser.add_argument("--quiet", action="store_true", help="no progress bars")
  return parser


def main(argv: Sequence[str] | None = None) -> int:
  """Runs the grid of `argv` (sys.argv[1:] by default); returns the exit code."""
  workdir: list[str] = []  # the run in progress, for the resume message

  def body() -> int:
    args = _parser().parse_args(argv)
    from specsample.eval.configs import miniature_config, resolve
    from specsample.eval.report import summary_table
    from specsample.eval.runner import extra_modules, load_models, run_eval

    grid = []  # (task, pipeline), all resolved before the first run
    for task in args.tasks:
      for temperature in args.temperatures:
        for gamma in args.gammas:
          config = miniature_config(task)
          config.name = f"{task}_t{temperature:g}_g{gamma}"
          config.temperature, config.gamma = temperature, gamma
          config.max_examples = args.max_examples
          config.workdir = os.path.join(args.out, config.name)
          grid.append((task, resolve(config)))
    require_modules(dict.fromkeys(name for _, pipeline in grid for name in extra_modules(pipeline)))
    reports, models, loaded = [], None, None  # models: loaded once per pair, shared by its runs
    for task, pipeline in grid:
      workdir.append(pipeline.workdir)
      if loaded != task:
        models, loaded = load_models(pipeline), task
      reports.append(run_eval(pipeline, show_progress=not args.quiet, models=models))
    table = summary_table(reports)
    with open(os.path.join(args.out, "table.md"), "w") as f:
      f.write(table)
    with open(os.path.join(args.out, "reports.json"), "w") as f:
      json.dump(reports, f, indent=2)
    print(table)
    return 0

  resume = lambda: examples_path(workdir[-1]) if workdir else None
  return run_command(PROG, body, resume)
