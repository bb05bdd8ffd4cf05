"""Streaming's native queue: a compiled loop pushes int32 items, a host thread pops them.

`push(packed)`, traced into a compiled program, is an XLA FFI custom call with a side
effect (`token_queue.cc`, built with the other kernels by setup.py): it copies packed
int32[n] (a stream id first, then the item) into the queue of that id and returns. The
loop neither waits for the host nor runs Python, and the program keeps JAX's fast call
path, which a host callback (`jax.experimental.io_callback`) gives up.

`Reader(stream_id, deliver)` opens the id's queue and hands each item, in order, to
`deliver(item)` (int32[n - 1]) on a thread of its own. `finish()`, called once the
program has ended, waits until every item has been delivered and forgets the queue. When
`deliver` raises, the reader delivers nothing more and stops the queue: the program's next
push returns an error, which ends the program at that iteration. A push to an id that no
reader opened is dropped.

Available on CPU only, where the extension is built (`available()`); elsewhere streaming
takes a host callback (`specsample.decoding.streaming`).
"""

from __future__ import annotations

import ctypes
import functools
import threading
from collections.abc import Callable

import jax
import numpy as np

from specsample.kernels import native

TARGET = "specsample_stream_tokens"
# What SpecsampleStreamPop answers besides an item's length (token_queue.cc).
_TIMED_OUT, _NO_STREAM, _FINISHED = -1, -2, -3
_WAIT_MS = 1000  # a pop's longest wait before the reader looks again


@functools.cache
def _library() -> ctypes.CDLL | None:
  """The extension with the queue's functions typed and its FFI target registered; None
  where it was not built or is out of date."""
  try:
    library = native.library()
    handler = library.SpecsampleStreamTokens
    for name in ("Open", "Stop", "Finish", "Close", "Pop"):
      getattr(library, "SpecsampleStream" + name).argtypes = [ctypes.c_int32]
  except (native.NativeUnavailable, AttributeError):  # not built, or built before it
    return None
  library.SpecsampleStreamOpen.restype = ctypes.c_int
  library.SpecsampleStreamPop.argtypes = [
    ctypes.c_int32, ctypes.POINTER(ctypes.c_int32), ctypes.c_int64, ctypes.c_int32
  ]  # fmt: skip
  library.SpecsampleStreamPop.restype = ctypes.c_int64
  jax.ffi.register_ffi_target(TARGET, jax.ffi.pycapsule(handler), platform="cpu")
  return library


def available() -> bool:
  """Whether the native queue can be used: the extension is built and has it, and
  programs run on CPU (the default backend)."""
  return jax.default_backend() == "cpu" and _library() is not None


def push(packed: jax.Array) -> None:
  """Inside a compiled program: packed int32[n] (the stream id, then the item) queued."""
  jax.ffi.ffi_call(TARGET, (), has_side_effect=True)(packed)


class Reader:
  """Hands the items pushed under `stream_id` to `deliver`, in order, on its own thread.

  Call `finish()` once the program has ended (its results ready): it delivers what is
  left, then forgets the queue. `error` holds what `deliver` raised, if it did.
  """

  def __init__(self, stream_id: int, deliver: Callable[[np.ndarray], None]):
    library = _library()
    if library is None:
      raise RuntimeError("the native token queue is not available")
    if library.SpecsampleStreamOpen(stream_id) != 0:
      raise ValueError(f"stream {stream_id} is open already")
    self._library, self._id, self._deliver = library, stream_id, deliver
    self.error: BaseException | None = None
    self._thread = threading.Thread(target=self._run, name="specsample-tokens", daemon=True)
    self._thread.start()

  def _run(self) -> None:
    buffer = np.empty(1024, np.int32)
    while True:
      pointer = buffer.ctypes.data_as(ctypes.POINTER(ctypes.c_int32))
      length = self._library.SpecsampleStreamPop(self._id, pointer, buffer.size, _WAIT_MS)
      if length == _TIMED_OUT:
        continue
      if length in (_FINISHED, _NO_STREAM):
        return
      if length > buffer.size:  # left in the queue: popped again with room for it
        buffer = np.empty(max(length, 2 * buffer.size), np.int32)
        continue
      if self.error is not None:
        continue  # stopped: what was pushed before the stop is dropped
      try:
        self._deliver(buffer[:length].copy())
      except BaseException as error:
        self.error = error
        self._library.SpecsampleStreamStop(self._id)

  def finish(self, *, stop: bool = False) -> None:
    """After the program has ended: delivers what is queued, then forgets the queue.
    stop=True (the program may still run, e.g. the wait for it was interrupted): delivers
    nothing more and makes the program's next push end it."""
    if stop:
      self._library.SpecsampleStreamStop(self._id)
    self._library.SpecsampleStreamFinish(self._id)
    self._thread.join()
    self._library.SpecsampleStreamClose(self._id)
