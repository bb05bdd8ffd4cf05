"""The acceptance trace of Leviathan et al.'s Figure 1, in the terminal and as HTML.

One line per speculative iteration: the text committed so far, then the draft tokens the
target accepted (green), the first draft token it rejected (red, struck through), and
the token the target itself supplied — the correction at the rejection, or the bonus
token when the whole block was accepted (blue).
"""

from __future__ import annotations

import dataclasses
import html
from collections.abc import Callable, Sequence

ACCEPTED, REJECTED, CORRECTION = "#1a7f37", "#cf222e", "#0969da"


@dataclasses.dataclass(frozen=True)
class TraceLine:
  prefix: str  # text committed before this iteration
  accepted: tuple[str, ...]  # accepted draft tokens
  rejected: str | None  # the first rejected draft token (None: all accepted)
  correction: str  # the target's token: correction or bonus


def trace_lines(
  iterations: Sequence[tuple[Sequence[int], int, int]],
  piece: Callable[[int], str],
  *,
  length: int | None = None,
) -> list[TraceLine]:
  """Lines from SpeculativeTrace.row(...) output; stops once `length` tokens (the row's
  output length) are committed, and shows nothing past the end of the row: when the row
  ends inside an accepted block (at EOS or max_new_tokens), the line ends there too."""
  lines, committed = [], 0
  prefix = ""
  for drafts, accepted, next_token in iterations:
    if length is not None and committed >= length:
      break
    kept = list(drafts[:accepted])
    rejected = piece(drafts[accepted]) if accepted < len(drafts) else None
    correction = piece(next_token)
    if length is not None and committed + accepted >= length:
      kept, rejected, correction = kept[: length - committed], None, ""
    line = TraceLine(prefix, tuple(piece(t) for t in kept), rejected, correction)
    lines.append(line)
    prefix += "".join(line.accepted) + line.correction
    committed += accepted + 1
  return lines


def render_rich(lines: Sequence[TraceLine], console=None) -> None:
  """Prints the trace with rich colours (green accepted, red rejected, blue target)."""
  from rich.console import Console
  from rich.text import Text

  console = console or Console()
  for line in lines:
    text = Text(line.prefix)
    for token in line.accepted:
      text.append(token, style=f"bold {ACCEPTED}")
    if line.rejected is not None:
      text.append(line.rejected, style=f"strike {REJECTED}")
    text.append(line.correction, style=f"bold {CORRECTION}")
    console.print(text)


def render_html(lines: Sequence[TraceLine], *, title: str, summary: str = "") -> str:
  """A standalone HTML page of the trace (inline CSS, no scripts)."""

  def span(kind: str, text: str) -> str:
    return f'<span class="{kind}">{html.escape(text)}</span>'

  legend = "".join(
    (
      span("accepted", "accepted draft token"),
      span("rejected", "rejected draft token"),
      span("correction", "target's token (correction or bonus)"),
    )
  )
  rows = []
  for number, line in enumerate(lines, start=1):
    parts = [span("prefix", line.prefix)] + [span("accepted", t) for t in line.accepted]
    if line.rejected is not None:
      parts.append(span("rejected", line.rejected))
    parts.append(span("correction", line.correction))
    rows.append(f'<div class="iteration" data-iteration="{number}">{"".join(parts)}</div>')
  return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>
body {{ font-family: ui-monospace, Menlo, Consolas, monospace; margin: 2em; }}
.iteration {{ white-space: pre-wrap; padding: 2px 0; border-bottom: 1px solid #eee; }}
.prefix {{ color: #57606a; }}
.accepted {{ color: {ACCEPTED}; font-weight: bold; }}
.rejected {{ color: {REJECTED}; text-decoration: line-through; }}
.correction {{ color: {CORRECTION}; font-weight: bold; }}
.legend span {{ margin-right: 1.5em; }}
</style></head><body>
<h1>{html.escape(title)}</h1>
<p class="legend">{legend}</p>
<p class="summary">{html.escape(summary)}</p>
{chr(10).join(rows)}
</body></html>
"""
