"""Per-example results on disk, appended as they finish, so an interrupted eval resumes.

The file is JSON lines: a header `{"fingerprint": ..., "checkpoints": ...}` then one record
per example. Records are flushed and fsynced batch by batch. On load:

- a half-written last line (the process was killed mid-write) is ignored, cut on the next
  append, and that example is decoded again;
- a corrupt line elsewhere (bad JSON, not a record) or a second record of an example
  already stored is dropped: the file is rewritten atomically (temp file + os.replace)
  with every valid record kept as written, and a warning says so; the dropped examples
  are decoded again, so the file never holds an example twice;
- a header of another configuration, or checkpoints whose files changed since, is
  refused (StoreMismatchError) rather than mixed into one report.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Iterable, Mapping, Sequence

from specsample.eval.errors import ConfigError

log = logging.getLogger(__name__)


class StoreMismatchError(ConfigError):
  """The results file belongs to a different configuration or other checkpoints."""


def checkpoint_fingerprint(path: str) -> str:
  """A cheap hash of a checkpoint's contents as the file system describes them: the
  relative names, sizes and mtimes (ns) of its files (recursively, sorted), no byte read.

  gs:// paths hash the path only: listing and stat-ing a bucket's objects needs GCS access
  and is slow, so a gs:// checkpoint replaced in place is not detected.
  """
  path = str(path).rstrip("/")
  if path.startswith("gs://"):
    entries: list = [path]
  elif os.path.isfile(path):
    stat = os.stat(path)
    entries = [["", stat.st_size, stat.st_mtime_ns]]
  elif os.path.isdir(path):
    entries = []
    for directory, subdirectories, files in os.walk(path):
      subdirectories.sort()
      for name in sorted(files):
        full = os.path.join(directory, name)
        stat = os.stat(full)
        entries.append([os.path.relpath(full, path), stat.st_size, stat.st_mtime_ns])
  else:
    raise FileNotFoundError(f"checkpoint {path}: no such file or directory")
  return hashlib.sha256(json.dumps(entries).encode()).hexdigest()[:16]


def _parse(line: bytes, fields: Sequence[str]) -> dict | None:
  """The record on `line`, or None when it is not one (bad JSON, no integer index...)."""
  try:
    record = json.loads(line.decode("utf-8"))
  except (UnicodeDecodeError, json.JSONDecodeError):
    return None
  if not isinstance(record, dict) or type(record.get("index")) is not int:
    return None
  return record if all(field in record for field in fields) else None


def _line_list(numbers: Sequence[int]) -> str:
  shown = ", ".join(map(str, numbers[:10]))
  return shown + (f" and {len(numbers) - 10} more" if len(numbers) > 10 else "")


class ResultStore:
  """`<workdir>/examples.jsonl` of one configuration.

  `checkpoints` is {role: {"path": ..., "contents": checkpoint_fingerprint(path)}};
  `fields` are the keys every record must have (a line without them is corrupt).
  """

  def __init__(
    self,
    path: str | os.PathLike,
    fingerprint: str,
    checkpoints: Mapping[str, Mapping[str, str]] | None = None,
    fields: Sequence[str] = ("index",),
  ):
    self.path, self.fingerprint = str(path), fingerprint
    self.checkpoints = {role: dict(value) for role, value in (checkpoints or {}).items()}
    self.fields = tuple(fields)
    self._indices: set[int] | None = None  # the examples in the file, once loaded

  def header(self) -> dict:
    header = {"fingerprint": self.fingerprint}
    if self.checkpoints:
      header["checkpoints"] = self.checkpoints
    return header

  def _check_header(self, line: bytes) -> bool:
    """Refuses another configuration's header; True when the header must be rewritten
    (written before checkpoints were fingerprinted: they are recorded now)."""
    try:
      header = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
      header = None
    if not isinstance(header, dict) or "fingerprint" not in header:
      raise StoreMismatchError(
        f"{self.path}: its first line is not a results header (the file is corrupt or not "
        "an eval's); delete it to start over, or choose another --config.workdir"
      )
    if header["fingerprint"] != self.fingerprint:
      raise StoreMismatchError(
        f"{self.path} holds results of another configuration (fingerprint "
        f"{header['fingerprint']!r}, this one {self.fingerprint!r}); choose another "
        "--config.workdir or delete the file to start over"
      )
    recorded = header.get("checkpoints")
    if recorded is None:
      if self.checkpoints:
        log.warning(
          "%s was written before checkpoint contents were recorded; assuming its "
          "checkpoints are the ones at the same paths now, and recording them",
          self.path,
        )
      return bool(self.checkpoints)
    for role, now in self.checkpoints.items():
      then = recorded.get(role, {})
      if then.get("contents") != now["contents"]:
        raise StoreMismatchError(
          f"{self.path}: the {role} checkpoint ({now['path']}) changed since these results "
          "were written (its files' names, sizes or modification times differ), so one "
          "report would mix two models; restore that checkpoint, choose another "
          "--config.workdir, or delete the file to start over"
        )
    return False

  def load(self) -> dict[int, dict]:
    """{example index: record} of the finished examples (empty for a new file); repairs
    the file first if it holds corrupt lines or duplicate examples (see the module doc)."""
    if not os.path.exists(self.path):
      self._indices = set()
      return {}
    with open(self.path, "rb") as f:
      data = f.read()
    if b"\n" not in data:  # empty, or killed while writing the header: nothing was done
      with open(self.path, "wb"):
        pass
      self._indices = set()
      return {}
    lines = data.split(b"\n")
    new_header = self._check_header(lines[0])
    # lines[-1] is b"" when the file ends with a newline, else a last line left unfinished.
    complete, tail = lines[1:-1], lines[-1]
    records, kept, corrupt, duplicates = {}, [], [], []
    for number, line in enumerate(complete, start=2):
      if not line.strip():
        continue
      record = _parse(line, self.fields)
      if record is None:
        corrupt.append(number)
      elif record["index"] in records:
        duplicates.append(number)
      else:
        records[record["index"]] = record
        kept.append(line)
    last = _parse(tail, self.fields) if tail.strip() else None
    if last is not None and last["index"] in records:
      duplicates.append(len(lines))
    elif last is not None:
      records[last["index"]] = last  # complete but for its newline (added on append)
      kept.append(tail)
    if corrupt or duplicates or new_header:
      self._rewrite([json.dumps(self.header()).encode(), *kept])
    if corrupt or duplicates:
      log.warning(
        "repaired %s: dropped %s; kept its %d valid records (each example once)",
        self.path,
        "; ".join(
          text
          for text in (
            corrupt and f"corrupt line(s) {_line_list(corrupt)} (decoded again)",
            duplicates and f"line(s) {_line_list(duplicates)} repeating examples already there",
          )
          if text
        ),
        len(records),
      )
    self._indices = set(records)
    return records

  def append(self, records: Iterable[dict]) -> None:
    """Adds finished records durably (header first when the file is new). Raises
    ValueError for an example already in the file: it would be counted twice."""
    records = list(records)
    if self._indices is None:
      self.load()
    indices = [record["index"] for record in records]
    seen = set(self._indices)
    for index in indices:
      if index in seen:
        raise ValueError(f"example {index} is already in {self.path}")
      seen.add(index)
    new = not os.path.exists(self.path) or os.path.getsize(self.path) == 0
    if not new:
      self._end_last_line()
    os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
    with open(self.path, "a", encoding="utf-8") as f:
      if new:
        f.write(json.dumps(self.header()) + "\n")
      for record in records:
        f.write(json.dumps(record, ensure_ascii=False) + "\n")
      f.flush()
      os.fsync(f.fileno())
    self._indices.update(indices)

  def _end_last_line(self) -> None:
    """Ends the last line: cuts it if a killed writer left it unfinished, or adds the
    newline a complete record lacks (checks one byte normally)."""
    with open(self.path, "rb+") as f:
      size = f.seek(0, os.SEEK_END)
      f.seek(size - 1)
      if f.read(1) == b"\n":
        return
      f.seek(0)
      data = f.read()
      start = data.rfind(b"\n") + 1
      if start > 0 and _parse(data[start:], self.fields) is not None:
        f.write(b"\n")
      else:
        f.truncate(start)

  def _rewrite(self, lines: Sequence[bytes]) -> None:
    """Replaces the file by `lines` atomically: a crash leaves the old file or the new."""
    directory = os.path.dirname(os.path.abspath(self.path))
    fd, temporary = tempfile.mkstemp(prefix=".examples.", suffix=".tmp", dir=directory)
    try:
      with os.fdopen(fd, "wb") as f:
        f.write(b"".join(line + b"\n" for line in lines))
        f.flush()
        os.fsync(f.fileno())
      shutil.copymode(self.path, temporary)
      os.replace(temporary, self.path)
    except BaseException:
      with contextlib.suppress(FileNotFoundError):
        os.remove(temporary)
      raise
    with contextlib.suppress(OSError):  # make the rename durable (not on every platform)
      directory_fd = os.open(directory, os.O_RDONLY)
      try:
        os.fsync(directory_fd)
      finally:
        os.close(directory_fd)
