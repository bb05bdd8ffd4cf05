"""The progress bar of long work (training stages, evals): rich's, with the description,
the bar, done / total, the time spent and the time left."""

from __future__ import annotations


def progress_bar(description: str = "{task.description}", *, disable: bool = False, **options):
  """A rich `Progress` (use it as a context manager); `description` is the first column's
  text (a rich template), `options` go to `Progress` (e.g. refresh_per_second)."""
  from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
  )

  columns = [TextColumn(description), BarColumn(), MofNCompleteColumn(),
             TimeElapsedColumn(), TimeRemainingColumn()]  # fmt: skip
  return Progress(*columns, disable=disable, **options)
