"""Per-example results on disk, appended as they finish, so an interrupted eval resumes.

The file is JSON lines: a header `{"fingerprint": ...}` then one record per example.
Records are flushed and fsynced batch by batch; a half-written last line (the process
was killed mid-write) is dropped on load, and that example is decoded again.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable


class StoreMismatchError(ValueError):
  """The results file belongs to a different configuration."""


class ResultStore:
  def __init__(self, path: str | os.PathLike, fingerprint: str):
    self.path, self.fingerprint = str(path), fingerprint

  def load(self) -> dict[int, dict]:
    """{example index: record} of the finished examples (empty for a new file)."""
    if not os.path.exists(self.path):
      return {}
    with open(self.path, encoding="utf-8") as f:
      lines = f.read().split("\n")
    try:
      header = json.loads(lines[0])
    except json.JSONDecodeError:
      header = {}
    if header.get("fingerprint") != self.fingerprint:
      raise StoreMismatchError(
        f"{self.path} holds results of another configuration (fingerprint "
        f"{header.get('fingerprint')!r}, this one {self.fingerprint!r}); choose another "
        "--config.workdir or delete the file to start over"
      )
    records = {}
    for line in lines[1:]:
      if not line.strip():
        continue
      try:
        record = json.loads(line)
      except json.JSONDecodeError:
        break  # a write cut short: the rest is redone
      records[int(record["index"])] = record
    return records

  def append(self, records: Iterable[dict]) -> None:
    """Adds finished records durably (header first when the file is new)."""
    new = not os.path.exists(self.path)
    if not new:
      self._drop_partial_line()
    os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
    with open(self.path, "a", encoding="utf-8") as f:
      if new:
        f.write(json.dumps({"fingerprint": self.fingerprint}) + "\n")
      for record in records:
        f.write(json.dumps(record, ensure_ascii=False) + "\n")
      f.flush()
      os.fsync(f.fileno())

  def _drop_partial_line(self) -> None:
    """Cuts a last line left unfinished by a killed writer (checks one byte normally)."""
    with open(self.path, "rb+") as f:
      size = f.seek(0, os.SEEK_END)
      if size == 0:
        return
      f.seek(size - 1)
      if f.read(1) == b"\n":
        return
      f.seek(0)
      f.truncate(f.read().rfind(b"\n") + 1)
