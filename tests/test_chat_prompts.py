"""The offline chat prompt set (specsample.data.chat_prompts) and the bundled bench prompts."""

from __future__ import annotations

import os
import re

import pytest

from specsample.data import chat_prompts
from specsample.data.chat_templates import CHAT_TEMPLATES, FILLERS, TASK_TEMPLATES

SMALL = chat_prompts.PromptSources(max_files=25)
BENCH = os.path.join(
  os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
  "specsample", "bundled", "smollm2", "prompts.jsonl",
)  # fmt: skip
SLOT = re.compile(r"\{(" + "|".join(FILLERS) + r")\}")


@pytest.fixture(scope="module")
def splits():
  return {split: chat_prompts.candidates(split, SMALL) for split in chat_prompts.SPLITS}


def test_build_prompts_is_deterministic():
  first = chat_prompts.build_prompts("train", 60, seed=3, sources=SMALL)
  assert first == chat_prompts.build_prompts("train", 60, seed=3, sources=SMALL)
  assert first != chat_prompts.build_prompts("train", 60, seed=4, sources=SMALL)
  assert len(first) == 60 and len(set(first)) == 60


def test_the_splits_share_no_source(splits):
  sources = {split: {p.source for ps in by_task.values() for p in ps}
             for split, by_task in splits.items()}  # fmt: skip
  assert sources["train"] and sources["held_out"]
  assert not sources["train"] & sources["held_out"]
  for split, names in sources.items():
    assert all(chat_prompts.split_of(name) == split for name in names)


def test_every_kind_of_source_and_task_is_there(splits):
  merged = {task: splits["train"][task] + splits["held_out"][task] for task in chat_prompts.TASKS}
  assert all(merged[task] for task in chat_prompts.TASKS), {t: len(p) for t, p in merged.items()}
  kinds = {p.source.split(":")[0] for ps in merged.values() for p in ps}
  assert kinds >= {"python", "man", "gettext", "license", "copyright", "chat"}


def test_templates_are_filled(splits):
  for by_task in splits.values():
    for prompts in by_task.values():
      for p in prompts:
        assert p.task in chat_prompts.TASKS and p.prompt.strip()
        if p.task == "chat":  # every slot filled
          assert not SLOT.search(p.prompt) and "{" not in p.prompt, p.prompt
        else:  # the quoted text (code may hold braces of its own) went in
          assert "{text}" not in p.prompt and "{heading}" not in p.prompt, p.prompt
  for templates in TASK_TEMPLATES.values():
    assert all("{text}" in t for t in templates)
  assert len(CHAT_TEMPLATES) >= 50


def test_quoted_text_is_cut_to_the_limit(splits):
  longest = max(len(p.prompt) for ps in splits["train"].values() for p in ps)
  assert longest <= SMALL.max_characters + 200  # the text plus its instruction


def test_strip_roff_keeps_the_words():
  lines = ['.\\" a comment', ".B ls", "lists \\fBfiles\\fR \\- quickly.", ".PP"]
  lines.append("Second \\(em part.")
  assert chat_prompts.strip_roff(lines) == "ls lists files - quickly.\n\nSecond - part."


def test_the_bundled_bench_prompts_are_held_out():
  prompts = chat_prompts.read_jsonl(BENCH)
  assert len(prompts) >= 32
  tasks = {p.task for p in prompts}
  assert tasks >= {"chat", "explain_code", "summarize", "rewrite"}
  assert all(chat_prompts.split_of(p.source) == "held_out" for p in prompts)
  assert len({p.prompt for p in prompts}) == len(prompts)
