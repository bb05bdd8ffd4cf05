"""Evaluates a target alone and target + draft speculatively over a task's eval split.

  python scripts/eval.py --config=configs/miniature_ende.py

Flags, overrides and exit codes: `python scripts/eval.py --help`
(specsample/eval/eval_command.py).
"""

import sys

from specsample.eval.eval_command import main

if __name__ == "__main__":
  sys.exit(main())
