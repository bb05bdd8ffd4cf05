"""The command's output paths (`--trace FILE`, `bench --out DIR`), made before the work:
creating them is the proof that they can be written (a permission check alone passes
/proc and read-only mounts), and what a run created is removed again when it fails or is
interrupted, so a failed run leaves no empty file or directory behind."""

from __future__ import annotations

import os
import pathlib
import shutil
import tempfile
from collections.abc import Sequence

from specsample.cli.options import UsageError


class Outputs:
  """The output files and directories one run created (none existed before it)."""

  def __init__(self) -> None:
    self.created: list[pathlib.Path] = []

  def new_file(self, path: str, *, overwrite: bool, what: str) -> None:
    """Makes the file `path` (empty) unless it exists and `overwrite` lets it be replaced;
    raises UsageError, one line, where it cannot be."""
    target = pathlib.Path(path)
    if target.is_dir():
      raise UsageError(f"{what} {path} is a directory")
    if target.exists() and not overwrite:
      raise UsageError(f"{what} {path} exists; pass --overwrite to replace it")
    parent = target.parent if str(target.parent) else pathlib.Path(".")
    if not parent.is_dir():
      raise UsageError(f"{what} {path}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK):
      raise UsageError(f"{what} {path}: directory {parent} is not writable")
    existed = target.exists()
    try:
      with open(target, "a" if existed else "x", encoding="utf-8"):
        pass  # appending nothing leaves an existing file as it is
    except OSError as error:
      raise UsageError(f"{what} {path} cannot be written: {error.strerror}") from None
    if not existed:
      self.created.append(target)

  def new_directory(self, path: str, names: Sequence[str], *, overwrite: bool) -> None:
    """Makes the directory `path` (and its missing parents) for the files `names`, and
    writes a file into it; refuses a directory holding any of `names` unless `overwrite`."""
    directory = pathlib.Path(path)
    if directory.exists() and not directory.is_dir():
      raise UsageError(f"--out {path} is a file, not a directory")
    existing = [name for name in names if (directory / name).exists()]
    if existing and not overwrite:
      raise UsageError(
        f"--out {path} already holds {', '.join(existing)}; pass --overwrite to replace them"
      )
    top = directory
    while not top.parent.exists() and top.parent != top:
      top = top.parent  # the outermost directory this run would make
    probe = top.parent if not top.exists() else top
    if not os.access(probe, os.W_OK):
      raise UsageError(f"--out {path}: {probe} is not writable")
    made = not top.exists()
    try:
      directory.mkdir(parents=True, exist_ok=True)
      if made:
        self.created.append(top)
      with tempfile.TemporaryFile(dir=directory):
        pass
    except OSError as error:
      self.remove_created()
      raise UsageError(f"--out {path} cannot be written: {error.strerror}") from None

  def remove_created(self) -> None:
    """Removes what this run created, newest first (a directory with all it holds: every
    file in it was written by this run)."""
    while self.created:
      path = self.created.pop()
      try:
        if path.is_dir() and not path.is_symlink():
          shutil.rmtree(path)
        else:
          path.unlink(missing_ok=True)
      except OSError:
        pass
