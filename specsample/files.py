"""Writing files so that a failure never leaves half of one: a full disk, an interrupt or an
error part-way leaves the old file (or none) where it was, whole.

Every file is written to a temporary file in the same directory, flushed to the disk, and
renamed onto its name (`os.replace`: atomic on POSIX and Windows), so a reader sees the old
file or the new one, never a mixture. `FileSet` does that for several files of one run (a
bench report's JSON, markdown and plots, a checkpoint's weights and config): all of them are
written first and renamed only when every one was, so a failure leaves every old file of
the set as it was. What fails is raised again (OSError: one line for the command line)
after the temporary files are removed.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import tempfile
from collections.abc import Iterator
from typing import Any

__all__ = ["FileSet", "replacing", "write_bytes", "write_json", "write_text"]


def _umask() -> int:
  mask = os.umask(0o022)
  os.umask(mask)
  return mask


_UMASK = _umask()  # read once, at import (setting it is process-wide)


def _temporary(path: pathlib.Path) -> pathlib.Path:
  """A new empty file beside `path`, keeping its suffix (writers that pick a format by
  suffix, as matplotlib's savefig and numpy's savez do, see the right one), with the
  permissions a plain `open(path, "w")` would give it (mkstemp's are owner-only)."""
  handle, name = tempfile.mkstemp(
    dir=path.parent if str(path.parent) else ".", prefix=f".{path.name}.", suffix=path.suffix
  )
  os.close(handle)
  os.chmod(name, 0o666 & ~_UMASK)
  return pathlib.Path(name)


def _sync(path: pathlib.Path) -> None:
  with open(path, "rb+") as f:
    os.fsync(f.fileno())


@contextlib.contextmanager
def replacing(path: str | os.PathLike) -> Iterator[pathlib.Path]:
  """Yields a temporary path beside `path` to write; when the block ends without an error
  the file is flushed to the disk and renamed onto `path`; when it fails (or the rename
  does) it is removed and `path` is as it was."""
  path = pathlib.Path(path)
  temporary = _temporary(path)
  try:
    yield temporary
    _sync(temporary)
    os.replace(temporary, path)
  except BaseException:
    temporary.unlink(missing_ok=True)
    raise


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
  with replacing(path) as temporary:
    temporary.write_bytes(data)


def write_text(path: str | os.PathLike, text: str, *, encoding: str = "utf-8") -> None:
  with replacing(path) as temporary:
    temporary.write_text(text, encoding=encoding)


def write_json(path: str | os.PathLike, value: Any, **dump_options) -> None:
  """json.dumps(value, **dump_options) and a newline, written whole or not at all."""
  write_text(path, json.dumps(value, **dump_options) + "\n")


class FileSet:
  """Several files written together: `path(name)` gives the temporary path to write each
  to; leaving the `with` block without an error renames them all into place (each rename
  atomic, none before every file is written); an error removes them and changes nothing.

    with FileSet(directory) as files:
      files.write_text("report.md", text)
      figure.savefig(files.path("plot.png"))
  """

  def __init__(self, directory: str | os.PathLike):
    self.directory = pathlib.Path(directory)
    self._pending: dict[pathlib.Path, pathlib.Path] = {}  # final path -> temporary path

  def path(self, name: str | os.PathLike) -> pathlib.Path:
    """The temporary path to write the file `name` (relative to the directory) to."""
    final = self.directory / name
    if final not in self._pending:
      self._pending[final] = _temporary(final)
    return self._pending[final]

  def write_text(self, name: str, text: str, *, encoding: str = "utf-8") -> None:
    self.path(name).write_text(text, encoding=encoding)

  def write_json(self, name: str, value: Any, **dump_options) -> None:
    self.write_text(name, json.dumps(value, **dump_options) + "\n")

  def __enter__(self) -> FileSet:
    return self

  def __exit__(self, kind, error, traceback) -> None:
    if kind is not None:
      self.discard()
      return
    try:
      for temporary in self._pending.values():
        _sync(temporary)
    except BaseException:
      self.discard()
      raise
    for final, temporary in self._pending.items():
      os.replace(temporary, final)
    self._pending.clear()

  def discard(self) -> None:
    """Removes the temporary files; the directory is as it was."""
    for temporary in self._pending.values():
      temporary.unlink(missing_ok=True)
    self._pending.clear()
