"""The native library: the C++ kernels setup.py builds, loaded once for every kernel module.

`library()` gives the extension as a `ctypes.CDLL` (each kernel module registers its own
XLA FFI targets from it and types its own C functions), or raises `NativeUnavailable`
saying why not: not built (no C++ compiler at install time), or built for another machine.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import os

EXTENSION = "specsample.kernels._small_k_matmul"


class NativeUnavailable(Exception):
  """The extension cannot be used here; the message says why."""


@functools.cache
def _load() -> ctypes.CDLL | str:
  spec = importlib.util.find_spec(EXTENSION)
  if spec is None or spec.origin is None:
    return "the extension was not built (no C++ compiler at install time?)"
  try:
    return ctypes.CDLL(spec.origin)
  except OSError as error:  # e.g. built for another machine
    return f"the extension {spec.origin} does not load: {error}"


def library() -> ctypes.CDLL:
  """The loaded extension; raises NativeUnavailable (with the reason) where it is not."""
  loaded = _load()
  if isinstance(loaded, str):
    raise NativeUnavailable(loaded)
  return loaded


def build_id() -> str:
  """The built extension, named by its file's size and modification time (every build,
  as a new version's install makes, gives another), or "none" where it was not built."""
  spec = importlib.util.find_spec(EXTENSION)
  if spec is None or spec.origin is None:
    return "none"
  stat = os.stat(spec.origin)
  return f"{stat.st_size}-{stat.st_mtime_ns}"


def out_of_date() -> str:
  """The reason to give when the library lacks a symbol its Python side expects."""
  origin = importlib.util.find_spec(EXTENSION).origin
  return f"the extension {origin} is out of date (pip install -e . again)"
