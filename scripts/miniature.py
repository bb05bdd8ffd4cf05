"""The offline miniature of Table 2: the eval pipeline over both bundled pairs.

Runs `scripts/eval.py`'s pipeline (seqio task over the shipped test file, target alone vs
speculative, BLEU or ROUGE, alpha, c, r, speedup) for every task x temperature x gamma
of the grid, one workdir each under --out (resumable like any eval), then writes the
combined table to --out/table.md and prints it.

  python scripts/miniature.py --out out/miniature [--gammas 2 3 5] [--max-examples 100]
"""

from __future__ import annotations

import argparse
import json
import os

from specsample.eval.configs import miniature_config, resolve
from specsample.eval.report import summary_table
from specsample.eval.runner import load_models, run_eval


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--out", default="out/miniature")
  parser.add_argument("--tasks", nargs="+", default=["ende", "docstrings"])
  parser.add_argument("--temperatures", nargs="+", type=float, default=[0.0, 1.0])
  parser.add_argument("--gammas", nargs="+", type=int, default=[2, 3, 5])
  parser.add_argument("--max-examples", type=int, default=-1, help="-1: the whole test split")
  parser.add_argument("--quiet", action="store_true", help="no progress bars")
  args = parser.parse_args()

  reports = []
  for task in args.tasks:
    models = None  # loaded once per pair, shared by its runs
    for temperature in args.temperatures:
      for gamma in args.gammas:
        config = miniature_config(task)
        config.name = f"{task}_t{temperature:g}_g{gamma}"
        config.temperature, config.gamma = temperature, gamma
        config.max_examples = args.max_examples
        config.workdir = os.path.join(args.out, config.name)
        pipeline = resolve(config)
        models = models or load_models(pipeline)
        reports.append(run_eval(pipeline, show_progress=not args.quiet, models=models))
  table = summary_table(reports)
  with open(os.path.join(args.out, "table.md"), "w") as f:
    f.write(table)
  with open(os.path.join(args.out, "reports.json"), "w") as f:
    json.dump(reports, f, indent=2)
  print(table)


if __name__ == "__main__":
  main()
