"""The offline miniature of Table 2: the eval pipeline over both bundled pairs.

  python scripts/miniature.py --out out/miniature [--gammas 2 3 5] [--max-examples 100]

Flags and exit codes: `python scripts/miniature.py --help`
(specsample/eval/miniature_command.py).
"""

import sys

from specsample.eval.miniature_command import main

if __name__ == "__main__":
  sys.exit(main())
