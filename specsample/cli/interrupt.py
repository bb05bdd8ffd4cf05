"""Ctrl-C (and SIGTERM, SIGHUP) for the `specsample` command: one line on stderr and exit
status 128 + the signal's number (130, 143, 129), at any moment (loading, compiling,
decoding, writing), what the run created removed.

A KeyboardInterrupt cannot promise that, for two reasons:

  - Python ignores an exception raised in a garbage-collection callback (JAX registers
    one): a Ctrl-C that lands there prints "Exception ignored ..." and the run goes on.
  - JAX compiles on XLA's own threads (`PjRtCompiler::CompileAndLoad` on a thread pool)
    while the main thread waits. An interrupt ends the wait, not the compilation, and the
    interpreter's teardown (JAX's `atexit` clean-up destroys the backend and its caches,
    then the MLIR module goes) frees what the compilation still reads: the process dies of
    a segmentation fault (exit status 139) after printing "interrupted".

So while the command runs, the signals' Python handlers do nothing and a thread of our own
waits for them (`signal.set_wakeup_fd`); it removes the outputs the run created, prints
the one line, flushes stdout and stderr and ends the process with `os._exit(128 + signal)`,
without a teardown that races XLA's threads. SIGTERM (`kill`, a job scheduler) and SIGHUP
(the terminal closed) are answered as SIGINT is; a signal the process was started with
ignored (a script's background job, `nohup`) stays ignored.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator

INTERRUPTED_EXIT = 130  # 128 + SIGINT, as shells report it
# The signals answered, and the line each prints after "`prog`: ".
SIGNALS = {
  signal.SIGINT: "interrupted",
  signal.SIGTERM: "terminated (SIGTERM)",
  signal.SIGHUP: "hung up (SIGHUP)",
}


def _ignore(signum, frame) -> None:
  """The signals' Python handler while the watcher runs (the watcher acts on them)."""


def _flush() -> None:
  for stream in (sys.stdout, sys.stderr):
    with contextlib.suppress(Exception):  # a closed pipe must not stop the exit
      stream.flush()


@contextlib.contextmanager
def exit_on_interrupt(prog: str, clean_up: Callable[[], None]) -> Iterator[None]:
  """Within the block, SIGINT, SIGTERM or SIGHUP calls `clean_up()`, prints "`prog`:
  interrupted" (or "terminated (SIGTERM)", "hung up (SIGHUP)") and ends the process at once
  with status 128 + the signal. Does nothing off the main thread, or where SIGINT is ignored
  (as the shell starts a script's background jobs); another signal started ignored stays
  ignored."""
  if (
    threading.current_thread() is not threading.main_thread()
    or signal.getsignal(signal.SIGINT) is signal.SIG_IGN  # e.g. a background job of a script
  ):
    yield
    return
  read_fd, write_fd = os.pipe()
  os.set_blocking(write_fd, False)
  answered = [s for s in SIGNALS if signal.getsignal(s) is not signal.SIG_IGN]
  previous_handlers = {s: signal.signal(s, _ignore) for s in answered}
  previous_fd = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
  active = threading.Event()
  active.set()

  def watch() -> None:
    while True:
      try:
        data = os.read(read_fd, 64)
      except OSError:
        return
      if not data:  # the block ended: the write end is closed
        os.close(read_fd)
        return
      received = [s for s in answered if s in data]
      if received and active.is_set():
        signum = received[0]
        with contextlib.suppress(Exception):
          clean_up()
        _flush()
        with contextlib.suppress(Exception):
          os.write(2, f"{prog}: {SIGNALS[signum]}\n".encode())
        os._exit(128 + signum)

  threading.Thread(target=watch, name="specsample-interrupt", daemon=True).start()
  try:
    yield
  finally:
    active.clear()
    signal.set_wakeup_fd(previous_fd)
    for s, handler in previous_handlers.items():
      signal.signal(s, handler)
    os.close(write_fd)
