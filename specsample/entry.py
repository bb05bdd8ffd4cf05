"""The `specsample` command's entry point: Ctrl-C answered from the first moment.

Importing the command line (JAX, XLA, the models) takes a few seconds. A SIGINT then
would print Python's traceback; here it ends the process with one line and exit status
130, as everywhere later. This module imports nothing heavy: it installs that answer,
then imports and runs the command, whose own handling (`specsample.cli.interrupt`: outputs
removed, no teardown racing XLA's threads) takes over while it works.
"""

from __future__ import annotations

import os
import signal
import sys
import threading


def _interrupted_while_starting(signum, frame) -> None:
  sys.stderr.write("specsample: interrupted\n")
  sys.stderr.flush()
  os._exit(130)


def answer_interrupts_while_starting() -> None:
  """SIGINT ends the process with one line and status 130 (not off the main thread, nor
  where SIGINT is ignored or handled by the caller already)."""
  if (
    threading.current_thread() is threading.main_thread()
    and signal.getsignal(signal.SIGINT) is signal.default_int_handler
  ):
    signal.signal(signal.SIGINT, _interrupted_while_starting)


def main(argv: list[str] | None = None) -> int:
  """Runs `specsample.cli.main.main(argv)` with Ctrl-C answered during its imports."""
  answer_interrupts_while_starting()
  from specsample.cli.main import main as run

  return run(argv)


if __name__ == "__main__":
  sys.exit(main())
