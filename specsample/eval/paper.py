"""The paper's Table 2 (Leviathan et al. 2023): T5-XXL target, one TPU-v4, batch 1."""

from __future__ import annotations

import dataclasses

TASKS = ("ende", "cnndm")
DRAFTS = ("t5-small", "t5-base", "t5-large")
TEMPERATURES = (0.0, 1.0)


@dataclasses.dataclass(frozen=True)
class PaperRow:
  task: str  # "ende" (WMT EnDe) or "cnndm" (CNN/DM)
  draft: str  # "t5-small", "t5-base" or "t5-large"
  temperature: float
  gamma: int
  alpha: float
  speedup: float

  @property
  def key(self) -> str:
    return row_key(self.task, self.draft, self.temperature)

  @property
  def label(self) -> str:
    task = {"ende": "EnDe", "cnndm": "CNN/DM"}[self.task]
    return f"{task}, T5-XXL target, {self.draft.upper()} draft, T={self.temperature:g}"


def row_key(task: str, draft: str, temperature: float) -> str:
  return f"{task}/{draft}/t{temperature:g}"


TABLE2: dict[str, PaperRow] = {
  row.key: row
  for row in (
    PaperRow("ende", "t5-small", 0.0, 7, 0.75, 3.4),
    PaperRow("ende", "t5-base", 0.0, 7, 0.80, 2.8),
    PaperRow("ende", "t5-large", 0.0, 7, 0.82, 1.7),
    PaperRow("ende", "t5-small", 1.0, 7, 0.62, 2.6),
    PaperRow("ende", "t5-base", 1.0, 5, 0.68, 2.4),
    PaperRow("ende", "t5-large", 1.0, 3, 0.71, 1.4),
    PaperRow("cnndm", "t5-small", 0.0, 5, 0.65, 3.1),
    PaperRow("cnndm", "t5-base", 0.0, 5, 0.73, 3.0),
    PaperRow("cnndm", "t5-large", 0.0, 3, 0.74, 2.2),
    PaperRow("cnndm", "t5-small", 1.0, 5, 0.53, 2.3),
    PaperRow("cnndm", "t5-base", 1.0, 3, 0.55, 2.2),
    PaperRow("cnndm", "t5-large", 1.0, 3, 0.56, 1.7),
  )
}


def paper_row(key: str) -> PaperRow | None:
  """The row named `key` ("ende/t5-small/t0"), None for "" (no paper counterpart)."""
  if not key:
    return None
  if key not in TABLE2:
    raise ValueError(f"unknown paper row {key!r}; known: {sorted(TABLE2)}")
  return TABLE2[key]
