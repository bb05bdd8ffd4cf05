"""The acceptance trace (Figure 1): lines, terminal rendering and the HTML page."""

from __future__ import annotations

import html.parser

import jax
import jax.numpy as jnp
import numpy as np
from rich.console import Console

from specsample import SamplingConfig, speculative_generate
from specsample.cli.trace import (
  ACCEPTED,
  CORRECTION,
  REJECTED,
  render_html,
  render_rich,
  trace_lines,
)
from specsample.models import MarkovLM

EOS = 1


def chain(successor: dict[int, int]) -> MarkovLM:
  table = np.array(jax.random.normal(jax.random.key(0), (8, 8)))
  for token, nxt in successor.items():
    table[token, nxt] = 20.0
  return MarkovLM(jnp.asarray(table, jnp.float32), eos_id=EOS)


# Target: 2 3 4 5 6 7 EOS. The draft errs after 4 (proposes 2 instead of 5).
TARGET = chain({0: 2, 2: 3, 3: 4, 4: 5, 5: 6, 6: 7, 7: EOS, EOS: 2})
DRAFT = chain({0: 2, 2: 3, 3: 4, 4: 2, 5: 6, 6: 7, 7: EOS, EOS: 2})


def known_run():
  out = speculative_generate(
    TARGET, DRAFT, [[0]], gamma=3, max_new_tokens=10, sampling=SamplingConfig(0.0), trace=True
  )
  return out, trace_lines(out.trace.row(0), lambda t: f"<{t}>", length=int(out.lengths[0]))


def test_lines_of_a_known_run():
  out, lines = known_run()
  assert out.sequences()[0] == [2, 3, 4, 5, 6, 7, EOS]
  # Iteration 1: drafts 2 3 4, all accepted, bonus 5. Iteration 2: drafts 6 7 EOS, all
  # accepted: the row ends inside the block, so the bonus token after EOS is not shown.
  assert [(l.accepted, l.rejected, l.correction) for l in lines] == [
    (("<2>", "<3>", "<4>"), None, "<5>"),
    (("<6>", "<7>", "<1>"), None, ""),
  ]
  out2 = speculative_generate(
    TARGET, DRAFT, [[3]], gamma=3, max_new_tokens=10, sampling=SamplingConfig(0.0), trace=True
  )
  lines2 = trace_lines(out2.trace.row(0), str, length=int(out2.lengths[0]))
  # From 3: draft 4 2 3 -> 4 accepted, 2 rejected, target corrects with 5.
  assert (lines2[0].accepted, lines2[0].rejected, lines2[0].correction) == (("4",), "2", "5")
  assert lines2[1].prefix == "45"


class _Spans(html.parser.HTMLParser):
  def __init__(self):
    super().__init__()
    self.rows, self.stack = [], []

  def handle_starttag(self, tag, attrs):
    attrs = dict(attrs)
    if tag == "div" and attrs.get("class") == "iteration":
      self.rows.append([])
    self.stack.append(attrs.get("class"))

  def handle_endtag(self, tag):
    self.stack.pop()

  def handle_data(self, data):
    if (
      self.rows
      and self.stack
      and self.stack[-1] in ("prefix", "accepted", "rejected", "correction")
    ):
      self.rows[-1].append((self.stack[-1], data))


def test_html_structure_and_colours():
  out2 = speculative_generate(
    TARGET, DRAFT, [[3]], gamma=3, max_new_tokens=10, sampling=SamplingConfig(0.0), trace=True
  )
  lines = trace_lines(out2.trace.row(0), lambda t: f"<{t}>", length=int(out2.lengths[0]))
  page = render_html(lines, title="known run", summary="gamma 3")
  assert page.startswith("<!DOCTYPE html>") and "<script" not in page
  for colour in (ACCEPTED, REJECTED, CORRECTION):
    assert colour in page
  assert ".rejected { color: #cf222e; text-decoration: line-through; }" in page
  parser = _Spans()
  parser.feed(page)
  assert len(parser.rows) == len(lines)
  first = parser.rows[0]
  assert [kind for kind, _ in first if kind != "prefix"] == ["accepted", "rejected", "correction"]
  assert [text for kind, text in first if kind != "prefix"] == ["<4>", "<2>", "<5>"]  # escaped
  # Accepted + correction spans, line by line, spell out the output.
  spelled = "".join(t for row in parser.rows for k, t in row if k in ("accepted", "correction"))
  assert spelled.startswith("".join(f"<{t}>" for t in out2.sequences()[0]))


def test_terminal_rendering_uses_the_colours():
  _, lines = known_run()
  console = Console(record=True, force_terminal=True, color_system="truecolor", width=120)
  render_rich(lines, console)
  exported = console.export_html(inline_styles=True)
  assert "#1a7f37" in exported and "#0969da" in exported
