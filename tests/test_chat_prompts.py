"""The offline chat prompt set (specsample.data.chat_prompts) and the bundled bench prompts."""

from __future__ import annotations

import os
import random
import re
from fractions import Fraction

import pytest

from specsample.data import chat_prompts, task_families
from specsample.data import task_family_words as words
from specsample.data.chat_templates import CHAT_TEMPLATES, FILLERS, TASK_TEMPLATES

SMALL = chat_prompts.PromptSources(max_files=25)
BENCH = os.path.join(
  os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
  "specsample", "bundled", "smollm2", "prompts.jsonl",
)  # fmt: skip
SLOT = re.compile(r"\{(" + "|".join(FILLERS) + r")\}")
SPLITS = chat_prompts.SPLITS


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


# ---------------------------------------------------------------- the task families

NUMBER = re.compile(r"\d+(?:[.,]\d+)*")


def test_the_families_leave_the_default_mix_alone(monkeypatch):
  with_families = {s: chat_prompts.build_prompts(s, 40, seed=11, sources=SMALL) for s in SPLITS}
  monkeypatch.setattr(task_families, "passage_prompts", lambda item, rng: [])
  monkeypatch.setattr(task_families, "generated_prompts", lambda seed, keep: iter(()))
  for split in SPLITS:
    assert with_families[split] == chat_prompts.build_prompts(split, 40, seed=11, sources=SMALL)


def test_every_family_has_train_candidates_and_keeps_its_split(splits):
  for task in task_families.FAMILY_TASKS:
    assert len(splits["train"][task]) >= 100, task
    for split, by_task in splits.items():
      assert all(chat_prompts.split_of(p.source) == split for p in by_task[task])
  held_out = {p.source for task in ("math", "reasoning") for p in splits["held_out"][task]}
  assert held_out, "some problem templates are held out"
  assert not held_out & {p.source for t in ("math", "reasoning") for p in splits["train"][t]}


def test_the_training_mix_covers_every_task_and_category(splits):
  mix = chat_prompts.TRAINING_MIX
  assert set(mix) == set(chat_prompts.TASKS) and all(w > 0 for w in mix.values())
  assert abs(sum(mix.values()) - 1) < 1e-9
  categories = task_families.SPEC_BENCH_TASKS
  assert len(categories) == 12 and {t for ts in categories.values() for t in ts} == set(mix)
  prompts = chat_prompts.build_prompts("train", 500, seed=2, sources=SMALL, weights=mix)
  assert len(prompts) == len(set(prompts)) == 500
  assert {p.task for p in prompts} == set(chat_prompts.TASKS)


def test_math_problems_are_well_formed():
  problems = list(task_families.problems("math", seed=0))
  assert len(problems) >= 5000 and len({p.prompt for p in problems}) == len(problems)
  for p in problems:
    assert "{" not in p.prompt and "}" not in p.prompt, p.prompt
    for number in NUMBER.findall(p.prompt):  # whole numbers only, none absurdly large
      assert number.isdigit() and int(number) <= 1_000_000, p.prompt
    if isinstance(p.answer, Fraction):
      assert p.answer >= 0 and p.answer.denominator <= 144, p
    else:
      assert isinstance(p.answer, int) and p.answer >= 0, p
  # Spot checks: answers match the numbers shown.
  checked = 0
  for p in problems:
    if match := re.fullmatch(r"What is (\d+)% of (\d+)\?", p.prompt):
      percent, whole = int(match[1]), int(match[2])
      assert percent * whole == 100 * p.answer
    elif match := re.fullmatch(r"Solve for x: (\d+)x \+ (\d+) = (\d+)", p.prompt):
      a, b, c = (int(g) for g in match.groups())
      assert a * p.answer + b == c
    elif match := re.fullmatch(r"What is (\d+)/(\d+) \+ (\d+)/(\d+)\? .*", p.prompt):
      a, b, c, d = (int(g) for g in match.groups())
      assert Fraction(a, b) + Fraction(c, d) == p.answer
    else:
      continue
    checked += 1
  assert checked >= 600


def test_reasoning_problems_are_well_formed():
  problems = list(task_families.problems("reasoning", seed=0))
  assert len(problems) >= 3000 and len({p.prompt for p in problems}) == len(problems)
  for p in problems:
    assert "{" not in p.prompt and "}" not in p.prompt and p.prompt[0].isupper(), p.prompt
  days = list(words.WEEKDAYS)
  later = re.compile(r"If today is (\w+), .* will it be in (\d+) days\?")
  checked = 0
  for p in problems:
    if match := later.fullmatch(p.prompt):
      assert days[(days.index(match[1]) + int(match[2])) % 7] == p.answer
      checked += 1
  assert checked >= 100


def test_no_prompt_has_an_unfilled_slot(splits):
  quoting = {"extraction", "rag", "explain_code", "docstring", "question", "summarize",
             "rewrite", "key_points", "error", "translate"}  # fmt: skip
  for by_task in splits.values():
    for task, prompts in by_task.items():
      if task not in quoting:  # generated from templates alone: no brace at all
        assert all("{" not in p.prompt and "}" not in p.prompt for p in prompts), task
  # The passage tasks: no brace outside the quoted text (code may hold braces of its own).
  rng, count = random.Random(0), 0
  for reader in (chat_prompts.python_items, chat_prompts.man_items, chat_prompts.license_items):
    for item in reader(SMALL):
      kind = task_families.passage_kind(item)
      passage = f"```python\n{item.text}\n```" if kind == "code" else item.text
      for _, prompt in task_families.passage_prompts(item, rng):
        assert passage in prompt
        rest = prompt.replace(passage, "")
        assert "{" not in rest and "}" not in rest, rest
        count += 1
  assert count >= 100


def test_the_families_are_deterministic():
  def held_out(source: str) -> bool:
    return chat_prompts.split_of(source) == "held_out"

  first = list(task_families.generated_prompts(seed=5, keep=held_out))
  assert first == list(task_families.generated_prompts(seed=5, keep=held_out))
  assert first != list(task_families.generated_prompts(seed=6, keep=held_out))
  # A source's prompts depend on that source and the seed alone, not on the sources around it.
  source = first[-1][1]
  alone = list(task_families.generated_prompts(seed=5, keep=lambda name: name == source))
  assert alone == [row for row in first if row[1] == source]
