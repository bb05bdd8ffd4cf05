"""Streaming: each iteration of a compiled loop hands the host the tokens it kept.

With streaming on (`SpeculativeSettings.stream`, or `on_tokens=` on the decoding
functions), the loop body ends by handing the host what the iteration committed:
int32[batch, k] tokens (k = gamma + 1 for speculative decoding, 1 for plain) and
int32[batch] counts, the first counts[row] of a row being the tokens it kept (not past
max_new_tokens, not past its EOS; 0 for rows that are done). The whole generation stays
one compiled `lax.while_loop`; with streaming off nothing is compiled in and the program
is the same as without this module.

How the tokens leave the loop. On CPU, with the kernels built, the loop pushes them into a
native queue (`specsample.kernels.token_queue`: an FFI custom call that copies a few
integers) and a reader thread of the call hands them to the sink; the loop never waits for
the host, and the program keeps JAX's fast call path. Elsewhere (an accelerator, or no
kernels) the loop makes one ordered host callback per iteration
(`jax.experimental.io_callback(..., ordered=True)`), which runs the sink while the loop
waits and costs the program JAX's per-call path for programs with callbacks. Either way
the sink sees every row's tokens in order, all of them before the decoding call returns.

How the callable reaches the compiled program. A compiled program is cached by its static
arguments and shapes, and a Python function traced into it stays in it: passing the
caller's function (or a sink object hashed by identity) as a static argument would compile
one program per function, and a sink hashed by value would silently call the sink of the
first call. So the program calls one fixed function, `_deliver`, with a stream id, an
int32 scalar passed as an ordinary (dynamic) argument. `open_stream(on_tokens)` registers
the caller's sink under a fresh id for exactly the duration of one call (it waits for the
program to finish before unregistering), and `_deliver` hands each iteration's tokens to
the sink of that id. Concurrent calls from several threads hold different ids and never
see each other's tokens; when a call ends nothing of it remains. A program with streaming
compiles once per settings and shapes, whatever the sinks.

The sink, `on_tokens(row, token_ids)`, runs on a host thread (the reader's, or the
callback's while the loop waits): keep it short (queue the work for another thread if it
is slow). An exception it raises stops the compiled loop (at that iteration with a
callback, at the next one with the queue; the sink is not called again) and is raised
again by the decoding call. `stream`
turns any decoding call that takes `on_tokens` into an iterator of (row, token ids).
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import logging
import queue
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import io_callback

from specsample.kernels import token_queue

OnTokens = Callable[[int, list[int]], Any]
"""`on_tokens(row, token_ids)`: a row's newly kept tokens, in order, as they are accepted."""

__all__ = ["OnTokens", "StreamClosed", "TokenStream", "emit", "open_stream", "stream"]


class StreamClosed(Exception):
  """Raised inside a sink to stop a decode whose tokens nobody reads any more."""


class _Sink:
  """One call's sink and the first error it raised."""

  def __init__(self, on_tokens: OnTokens | None):
    self.on_tokens = on_tokens
    self.error: BaseException | None = None

  def deliver(self, item: np.ndarray) -> None:
    """item int32[1 + batch + batch * k]: k, the counts int32[batch], the tokens int32[batch,
    k] -> on_tokens per row with new tokens."""
    if self.on_tokens is None:
      return
    width = int(item[0])
    batch = (item.size - 1) // (width + 1)
    counts, tokens = item[1 : 1 + batch], item[1 + batch :].reshape(batch, width)
    try:
      for row in np.flatnonzero(counts):
        self.on_tokens(int(row), tokens[row, : counts[row]].tolist())
    except BaseException as error:
      self.error = error
      raise


class _OpenStreams:
  """The sinks of the calls now running, by id; an entry lives as long as its call."""

  def __init__(self):
    self._lock = threading.Lock()
    self._ids = itertools.count()
    self._sinks: dict[int, _Sink] = {}

  def add(self, sink: _Sink) -> int:
    with self._lock:
      stream_id = next(self._ids) % (2**31 - 1) + 1  # an int32 > 0
      self._sinks[stream_id] = sink
      return stream_id

  def remove(self, stream_id: int) -> None:
    with self._lock:
      del self._sinks[stream_id]

  def get(self, stream_id: int) -> _Sink | None:
    with self._lock:
      return self._sinks.get(stream_id)


_OPEN_STREAMS = _OpenStreams()


def _deliver(packed: jax.Array) -> None:
  """The host callback: packed int32[2 + batch + batch * k]: the stream id, then the item."""
  packed = np.asarray(packed)
  sink = _OPEN_STREAMS.get(int(packed[0]))
  if sink is not None:  # None: a program run outside open_stream; its tokens are dropped
    sink.deliver(packed[1:])


def emit(stream_id: jax.Array, tokens: jax.Array, counts: jax.Array) -> None:
  """Inside a compiled loop: hands one iteration's kept tokens to the call's sink (the
  native queue's push on CPU where it is built, else an ordered host callback).

  Args:
    stream_id: int32[] from `open_stream`, passed into the program as an argument.
    tokens: int32[batch, k] the iteration's committed candidates, in order.
    counts: int32[batch] how many of them each row kept (0..k).
  """
  # One array, not three: the callback's cost is mostly a conversion per argument.
  width = jnp.full((1,), tokens.shape[1], jnp.int32)
  packed = jnp.concatenate(
    [jnp.reshape(stream_id, (1,)), width, counts, tokens.reshape(-1)], dtype=jnp.int32
  )
  if token_queue.available():
    token_queue.push(packed)
  else:
    io_callback(_deliver, None, packed, ordered=True)


@contextlib.contextmanager
def open_stream(on_tokens: OnTokens | None) -> Iterator[np.int32]:
  """Registers `on_tokens` for one call; yields the stream id to pass to the program.

  The body must wait for the program's results (`jax.block_until_ready`) before it ends,
  or later iterations find no sink. An exception of the sink, which stops the program,
  is raised again here in place of the runtime error that reports it. `on_tokens=None`
  drops the tokens (a streaming program run for timing).
  """
  sink = _Sink(on_tokens)
  stream_id = _OPEN_STREAMS.add(sink)
  # Without a sink nothing opens the queue: the program's pushes are dropped.
  native = on_tokens is not None and token_queue.available()
  try:
    reader = token_queue.Reader(stream_id, sink.deliver) if native else None
    ended = False
    try:
      yield np.int32(stream_id)
      ended = True
    finally:
      if reader is not None:  # every token delivered (if the wait failed, the loop stopped)
        reader.finish(stop=not ended)
  except Exception:
    if sink.error is not None:
      raise sink.error from None
    raise
  finally:
    _OPEN_STREAMS.remove(stream_id)
  if sink.error is not None:  # the sink failed yet the program did not say so
    raise sink.error


def _unless_stream_closed(record: logging.LogRecord) -> bool:
  """JAX logs every exception a callback raises; a closed stream's is expected: not logged."""
  return not (record.exc_info and isinstance(record.exc_info[1], StreamClosed))


logging.getLogger("jax._src.callback").addFilter(_unless_stream_closed)


class TokenStream:
  """An iterator of (row, token ids) as a decoding call accepts them.

  `TokenStream(decode, *args, **kwargs)` runs `decode(*args, on_tokens=..., **kwargs)`
  in a worker thread when iteration starts; each item is one row's newly kept tokens
  (a list of ints). Once it is exhausted, `output` holds the call's result (the
  GenerationOutput); an error of the call is raised by the iteration. Leaving the loop
  early (`break`, `close()`) stops the decode at its next iteration. A stream still open
  when the interpreter exits is closed first (its decode stopped and waited for): a
  compiled loop must not be running while the interpreter tears JAX down, which aborts
  the process.
  """

  _DONE = object()
  _live: weakref.WeakSet = weakref.WeakSet()  # the streams iterated and not closed yet

  def __init__(self, decode: Callable[..., Any], *args, **kwargs):
    self._decode, self._args, self._kwargs = decode, args, kwargs
    self._items: queue.SimpleQueue = queue.SimpleQueue()
    self._closed = threading.Event()
    self._thread: threading.Thread | None = None
    self.output: Any = None

  def _run(self) -> None:
    try:
      result = self._decode(*self._args, on_tokens=self._put, **self._kwargs)
    except StreamClosed:
      result = None
    except BaseException as error:  # raised again by the consumer's iteration
      self._items.put((self._DONE, error))
      return
    self._items.put((self._DONE, result))

  def _put(self, row: int, tokens: list[int]) -> None:
    if self._closed.is_set():
      raise StreamClosed
    self._items.put((row, tokens))

  def __iter__(self) -> Iterator[tuple[int, list[int]]]:
    if self._thread is not None:
      raise RuntimeError("a TokenStream can be iterated once")
    self._thread = threading.Thread(target=self._run, name="specsample-stream", daemon=True)
    self._live.add(self)
    self._thread.start()
    try:
      while True:
        row, item = self._items.get()
        if row is self._DONE:
          if isinstance(item, BaseException):
            raise item
          self.output = item
          return
        yield row, item
    finally:
      self.close()

  def close(self) -> None:
    """Stops the decode at its next iteration (if still running) and waits for it."""
    self._closed.set()
    thread = self._thread
    if thread is not None and thread.is_alive() and thread is not threading.current_thread():
      thread.join()
    self._live.discard(self)  # (a class attribute: still there at the interpreter's exit)


@atexit.register
def _close_live_streams() -> None:
  """At exit, before JAX's own clean-up (registered earlier, so run later): every stream
  whose decode may still run is closed."""
  for token_stream in list(TokenStream._live):
    with contextlib.suppress(Exception):
      token_stream.close()


def stream(decode: Callable[..., Any], *args, **kwargs) -> TokenStream:
  """`TokenStream(decode, *args, **kwargs)`: e.g. `for row, ids in stream(generate, model,
  prompts, max_new_tokens=64)`, then `.output` holds generate's GenerationOutput."""
  return TokenStream(decode, *args, **kwargs)
