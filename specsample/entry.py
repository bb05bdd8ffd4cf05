"""The `specsample` command's entry point: Ctrl-C (SIGTERM, SIGHUP) answered from the first
moment.

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

# What each signal prints after "specsample: " (as specsample.cli.interrupt.SIGNALS).
_LINES = {
  signal.SIGINT: "interrupted",
  signal.SIGTERM: "terminated (SIGTERM)",
  signal.SIGHUP: "hung up (SIGHUP)",
}


def _interrupted_while_starting(signum, frame) -> None:
  sys.stderr.write(f"specsample: {_LINES[signum]}\n")
  sys.stderr.flush()
  os._exit(128 + signum)


def answer_interrupts_while_starting() -> None:
  """SIGINT, SIGTERM and SIGHUP end the process with one line and status 128 + the signal
  (not off the main thread, nor where a signal is ignored or handled by the caller
  already)."""
  if threading.current_thread() is not threading.main_thread():
    return
  if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
    signal.signal(signal.SIGINT, _interrupted_while_starting)
  for signum in (signal.SIGTERM, signal.SIGHUP):
    if signal.getsignal(signum) is signal.SIG_DFL:
      signal.signal(signum, _interrupted_while_starting)


def main(argv: list[str] | None = None) -> int:
  """Runs `specsample.cli.main.main(argv)` with Ctrl-C answered during its imports."""
  answer_interrupts_while_starting()
  from specsample.cli.main import main as run

  return run(argv)


if __name__ == "__main__":
  sys.exit(main())
