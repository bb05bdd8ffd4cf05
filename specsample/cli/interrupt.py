"""Ctrl-C for the `specsample` command: one line on stderr and exit status 130, at any
moment (loading, compiling, decoding, writing).

A KeyboardInterrupt cannot promise that, for two reasons:

  - Python ignores an exception raised in a garbage-collection callback (JAX registers
    one): a Ctrl-C that lands there prints "Exception ignored ..." and the run goes on.
  - JAX compiles on XLA's own threads (`PjRtCompiler::CompileAndLoad` on a thread pool)
    while the main thread waits. An interrupt ends the wait, not the compilation, and the
    interpreter's teardown (JAX's `atexit` clean-up destroys the backend and its caches,
    then the MLIR module goes) frees what the compilation still reads: the process dies of
    a segmentation fault (exit status 139) after printing "interrupted".

So while the command runs, SIGINT's Python handler does nothing and a thread of our own
waits for the signal (`signal.set_wakeup_fd`); it removes the outputs the run created,
prints the one line, flushes stdout and stderr and ends the process with `os._exit(130)`,
without a teardown that races XLA's threads.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator

INTERRUPTED_EXIT = 130  # 128 + SIGINT, as shells report it


def _ignore(signum, frame) -> None:
  """SIGINT's Python handler while the watcher runs (the watcher acts on it)."""


def _flush() -> None:
  for stream in (sys.stdout, sys.stderr):
    with contextlib.suppress(Exception):  # a closed pipe must not stop the exit
      stream.flush()


@contextlib.contextmanager
def exit_on_interrupt(prog: str, clean_up: Callable[[], None]) -> Iterator[None]:
  """Within the block, SIGINT calls `clean_up()`, prints "`prog`: interrupted" and ends the
  process at once with status 130. Does nothing off the main thread, or where SIGINT is
  ignored (as the shell starts a script's background jobs)."""
  if (
    threading.current_thread() is not threading.main_thread()
    or signal.getsignal(signal.SIGINT) is signal.SIG_IGN  # e.g. a background job of a script
  ):
    yield
    return
  read_fd, write_fd = os.pipe()
  os.set_blocking(write_fd, False)
  previous_handler = signal.signal(signal.SIGINT, _ignore)
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
      if signal.SIGINT in data and active.is_set():
        with contextlib.suppress(Exception):
          clean_up()
        _flush()
        with contextlib.suppress(Exception):
          os.write(2, f"{prog}: interrupted\n".encode())
        os._exit(INTERRUPTED_EXIT)

  threading.Thread(target=watch, name="specsample-interrupt", daemon=True).start()
  try:
    yield
  finally:
    active.clear()
    signal.set_wakeup_fd(previous_fd)
    signal.signal(signal.SIGINT, previous_handler)
    os.close(write_fd)
