"""The prepared accelerator check: paper-shaped pairs with random bfloat16 weights, timed on
the default device (GPU/TPU; CPU with --tiny), one table and a JSON file.

  PYTHONPATH=. python scripts/accelerator_check.py --out accelerator_check.json

What each column means: `--help` (specsample/cli/accelerator_check.py).
"""

import sys

from specsample.cli.accelerator_check import main

if __name__ == "__main__":
  sys.exit(main())
