"""The generated task families of the chat prompts (`chat_prompts`): the Spec-Bench
categories that the quoted-text tasks do not cover.

- "math": word problems (`task_family_math`: seeded numbers, names and objects);
- "reasoning": logic and commonsense problems (`task_family_reasoning`);
- "roleplay": "You are <role>. <request>" over the roles and requests of
  `task_family_words`;
- "writing": stories, poems, emails and letters, blog intros, product descriptions and
  speeches over the topics of `task_family_words.WRITING_FORMS` (tone, audience, length
  and constraint drawn);
- "stem", "humanities": explanatory questions over the topics of `task_family_topics`;
- "extraction": a quoted passage (a man page, a license text, a docstring or a function:
  a `chat_prompts.Item`) and what to extract from it (options, commands, names, dates,
  numbers, a JSON object, a table);
- "rag": a quoted passage and a question to answer from that passage alone.

Sources, the unit of the train / held-out split: "math:<i>" and "reasoning:<i>" (one
template each), "roleplay:<role>", "writing:<form>:<topic>", "stem:<domain>:<topic>",
"humanities:<domain>:<topic>"; "extraction" and "rag" keep their passage's source
("man:ls", "license:GPL-3", ...), so a held-out page stays out of train in every task.

Deterministic: the prompts of a generated source come from a `random.Random` seeded with
that source and `seed` alone (skipping the other split's sources changes nothing), and
the passage tasks draw their templates from the caller's RNG, in the caller's item order.
"""

from __future__ import annotations

import dataclasses
import itertools
import random
import re
from collections.abc import Callable, Iterator
from fractions import Fraction
from typing import Protocol

from specsample.data import task_family_topics as topics
from specsample.data import task_family_words as words
from specsample.data.task_family_math import MATH_TEMPLATES
from specsample.data.task_family_reasoning import REASONING_TEMPLATES


class Passage(Protocol):
  """What the passage tasks read of a quoted item (`chat_prompts.Item`)."""

  kind: str  # "code", "text", "message"
  source: str  # "man:ls", "license:GPL-3", "python:os.py", ...
  text: str
  name: str


FAMILY_TASKS = ("math", "reasoning", "roleplay", "writing", "stem", "humanities", "extraction",
                "rag")  # fmt: skip
# Spec-Bench's categories (MT-bench's eight, then translation, summarization, QA, math,
# RAG) and the tasks of `chat_prompts` that stand for each.
SPEC_BENCH_TASKS = {"writing": ("writing",), "roleplay": ("roleplay",),
                    "reasoning": ("reasoning",), "math": ("math",),
                    "coding": ("explain_code", "docstring", "question"),
                    "extraction": ("extraction",), "stem": ("stem",),
                    "humanities": ("humanities",), "translation": ("translate",),
                    "summarization": ("summarize", "key_points", "rewrite"),
                    "qa": ("chat", "error"), "rag": ("rag",)}  # fmt: skip
PROBLEM_TEMPLATES = {"math": MATH_TEMPLATES, "reasoning": REASONING_TEMPLATES}
PER_TEMPLATE = 400  # problems of one math / reasoning template at most
WRITING_VARIANTS = 6  # fillings of the drawn slots per writing template and topic
EXPLAIN_VARIANTS = 2  # audiences per stem / humanities template and topic
_WRITING_SLOTS = {"tone": words.TONES, "audience": words.AUDIENCES, "length": words.LENGTHS,
                  "constraint": words.CONSTRAINTS}  # fmt: skip
_EXPLAIN_SLOTS = {"audience": topics.EXPLAIN_AUDIENCES}
_SLOT = re.compile(r"\{(\w+)\}")
Keep = Callable[[str], bool]  # source -> whether to generate it (its split)


def _everything(source: str) -> bool:
  return True


def _source_rng(source: str, seed: int) -> random.Random:
  return random.Random(f"{source}|{seed}")


@dataclasses.dataclass(frozen=True)
class Problem:
  source: str  # "math:7": the template
  prompt: str
  answer: int | Fraction | str  # exact; "" for open questions (never shown in the prompt)


def problems(task: str, seed: int = 0, keep: Keep = _everything,
             per_template: int = PER_TEMPLATE) -> Iterator[Problem]:  # fmt: skip
  """Up to `per_template` different problems of each "math" or "reasoning" template whose
  source `keep` accepts, in template order."""
  for number, (draw, answer_key, phrasing) in enumerate(PROBLEM_TEMPLATES[task]):
    source = f"{task}:{number}"
    if not keep(source):
      continue
    rng, seen = _source_rng(source, seed), set()
    for _ in range(3 * per_template):  # templates with few distinct problems stop early
      values = draw(rng)
      prompt = phrasing.format(**values)
      prompt = prompt[0].upper() + prompt[1:]
      if prompt not in seen:
        seen.add(prompt)
        yield Problem(source, prompt, values[answer_key])
        if len(seen) == per_template:
          break


def _fillings(template: str, fixed: dict[str, str], drawn: dict[str, tuple[str, ...]],
              rng: random.Random, variants: int) -> Iterator[str]:  # fmt: skip
  """Up to `variants` different fillings of `template`: the `fixed` slots as given, each
  other slot from `drawn` (combinations sampled by `rng`, none twice)."""
  free = [slot for slot in dict.fromkeys(_SLOT.findall(template)) if slot not in fixed]
  combinations = list(itertools.product(*(drawn[slot] for slot in free)))
  for combination in rng.sample(combinations, min(variants, len(combinations))):
    yield template.format(**fixed, **dict(zip(free, combination, strict=True)))


def roleplay_prompts(seed: int = 0, keep: Keep = _everything) -> Iterator[tuple[str, str]]:
  """(source, prompt): every request to every role, each with an opener drawn."""
  for role in words.ROLES:
    source = f"roleplay:{role}"
    if keep(source):
      rng = _source_rng(source, seed)
      for request in words.ROLE_REQUESTS:
        yield source, f"{rng.choice(words.ROLE_OPENERS).format(role=role)} {request}"


def _topic_prompts(source, topic, templates, slots, variants, seed) -> Iterator[tuple[str, str]]:
  """(source, prompt) of each template over one topic, the other slots drawn from `slots`
  by the source's own RNG."""
  rng = _source_rng(source, seed)
  for template in templates:
    yield from ((source, prompt) for prompt in _fillings(template, {"topic": topic}, slots, rng,
                                                          variants))  # fmt: skip


def writing_prompts(seed: int = 0, keep: Keep = _everything) -> Iterator[tuple[str, str]]:
  """(source, prompt): every template of a writing form over each of its topics."""
  for form, (templates, form_topics) in words.WRITING_FORMS.items():
    for topic in form_topics:
      source = f"writing:{form}:{topic}"
      if keep(source):
        yield from _topic_prompts(source, topic, templates, _WRITING_SLOTS, WRITING_VARIANTS, seed)


def explanation_prompts(
  task: str, seed: int = 0, keep: Keep = _everything
) -> Iterator[tuple[str, str]]:
  """(source, prompt) of "stem" or "humanities": the general and the domain's templates
  over each topic of the domain."""
  domains = topics.STEM_TOPICS if task == "stem" else topics.HUMANITIES_TOPICS
  for domain, domain_topics in domains.items():
    templates = topics.GENERAL_TEMPLATES + topics.DOMAIN_TEMPLATES[domain]
    for topic in domain_topics:
      source = f"{task}:{domain}:{topic}"
      if keep(source):
        yield from _topic_prompts(source, topic, templates, _EXPLAIN_SLOTS, EXPLAIN_VARIANTS, seed)


def generated_prompts(seed: int = 0, keep: Keep = _everything) -> Iterator[tuple[str, str, str]]:
  """(task, source, prompt) of every generated family (all but "extraction" and "rag") for
  the sources `keep` accepts."""
  for task in PROBLEM_TEMPLATES:
    yield from ((task, p.source, p.prompt) for p in problems(task, seed, keep))
  yield from (("roleplay", source, prompt) for source, prompt in roleplay_prompts(seed, keep))
  yield from (("writing", source, prompt) for source, prompt in writing_prompts(seed, keep))
  for task in ("stem", "humanities"):
    yield from ((task, source, prompt) for source, prompt in explanation_prompts(task, seed, keep))


# fmt: off
# Extraction instructions by passage kind; {text}: the passage, {name}: its command/function.
EXTRACTION_TEMPLATES = {
  "man": (
    "List every command-line option mentioned in this excerpt of the `{name}` manual, one per "
    "line, with a few words on each.\n\n{text}",
    "Extract all the command and program names mentioned in the text below, as a comma-separated "
    "list.\n\n{text}",
    "Make a Markdown table with the columns Option and Meaning from this manual text:\n\n{text}",
    'Read this excerpt of the `{name}` manual and return a JSON object with the keys "command", '
    '"purpose" and "options".\n\n{text}',
    "Extract every file path, environment variable and setting mentioned below; write \"none\" "
    "for a kind that does not occur.\n\n{text}",
  ),
  "license": (
    "Extract the names of all people, organisations and projects mentioned in this text.\n\n{text}",
    "List every year, date and number that appears in the text below, each with what it refers "
    "to.\n\n{text}",
    'Return a JSON object with the keys "license", "copyright_holders", "years" and "conditions", '
    'filled from this text (null where it says nothing).\n\n{text}',
    "Make a table of the permissions, conditions and limitations stated in this text.\n\n{text}",
    "Extract every condition that a user of the software must meet, according to this text, as a "
    "numbered list.\n\n{text}",
  ),
  "docstring": (
    "List the parameters that this documentation of `{name}` mentions, with the meaning of each, "
    "as a JSON object.\n\n{text}",
    "Extract every function, class, module and constant name mentioned in this text.\n\n{text}",
    "Make a Markdown table with the columns Name and Description for everything this "
    "documentation of `{name}` describes.\n\n{text}",
    'Extract what `{name}` returns and which exceptions it raises, as JSON with the keys '
    '"returns" and "raises".\n\n{text}',
  ),
  "code": (
    "List the names of all functions and methods that this code calls, one per line.\n\n{text}",
    "Extract the parameters of `{name}` and their default values as a JSON object.\n\n{text}",
    "Make a table of the local variables of `{name}` and what each one holds.\n\n{text}",
    "Extract every string literal in this code, one per line.\n\n{text}",
    "Which exceptions can `{name}` raise? Extract them as a JSON list.\n\n{text}",
  ),
}
# Retrieval-augmented frames ({text}: the context, {question}) and questions by passage kind.
RAG_TEMPLATES = (
  "Answer using only the context below; if it does not hold the answer, say so.\n\nContext:\n"
  "{text}\n\nQuestion: {question}",
  "Use only the following passage to answer the question. Do not use outside knowledge."
  "\n\nPassage:\n{text}\n\nQuestion: {question}\nAnswer:",
  'Context:\n"""\n{text}\n"""\n\nBased only on the context above: {question}',
  "Here is a document:\n\n{text}\n\nFrom this document alone, answer and quote the supporting "
  "sentence: {question}",
  '{question}\n\nAnswer from this text alone, and say "not stated" if it does not tell:\n\n{text}',
)
RAG_QUESTIONS = {
  "man": ("What is `{name}` used for?", "Which options of `{name}` does the context describe?",
          'What does the context say about "{term}"?',
          "How do I use `{name}`, according to the context?",
          "Does the context mention any files that `{name}` reads or changes?"),
  "license": ("Who holds the copyright?",
              "Under what conditions may the software be redistributed?",
              "Does the text give any warranty?", 'What does the text say about "{term}"?',
              "Am I allowed to modify the software, and if so, under which conditions?"),
  "docstring": ("What does `{name}` return?", 'What does the context say about "{term}"?',
                "Which arguments does `{name}` accept?", "When should I use `{name}`?",
                "What happens when `{name}` gets an invalid argument?"),
  "code": ("What does `{name}` return?", "Which arguments does `{name}` take, with which defaults?",
           "Can `{name}` raise an exception? When?", "What is `{term}` used for in this code?"),
}
# Long words too common to ask about ("What does the context say about ...?").
_COMMON_WORDS = frozenset(
  "although anything argument arguments available because containing continue default "  # noqa: SIM905
  "describes described different directly following function however includes including "
  "instance isinstance information otherwise possible provided received required returned "
  "returns software specified therefore whatever whenever whether without".split()
)
# fmt: on


def passage_kind(item: Passage) -> str | None:
  """The kind of quoted text `item` holds: "man", "license" (license and copyright files),
  "docstring", "code", or None (program messages: too short to quote)."""
  if item.kind == "code":
    return "code"
  if item.kind != "text":
    return None
  prefix = item.source.split(":", 1)[0]
  kinds = {"man": "man", "license": "license", "copyright": "license", "python": "docstring"}
  return kinds.get(prefix)


def _term(text: str, kind: str, rng: random.Random) -> str | None:
  """What to ask about in `text` (None when it has nothing): a variable that code assigns,
  or a long word of a text."""
  if kind == "code":
    terms = set(re.findall(r"^\s*([a-z_][a-z0-9_]{2,})\s*=[^=]", text, re.MULTILINE))
  else:
    terms = set(re.findall(r"\b[a-z]{8,}\b", text)) - _COMMON_WORDS
  return rng.choice(sorted(terms)) if terms else None


def passage_prompts(item: Passage, rng: random.Random) -> list[tuple[str, str]]:
  """(task, prompt): one "extraction" and one "rag" prompt quoting `item`'s text (code in a
  fence), templates drawn by `rng`; [] for an item that is not a passage."""
  kind = passage_kind(item)
  if kind is None:
    return []
  passage = f"```python\n{item.text}\n```" if kind == "code" else item.text
  extraction = rng.choice(EXTRACTION_TEMPLATES[kind]).format(text=passage, name=item.name)
  term = _term(item.text, kind, rng)
  questions = [q for q in RAG_QUESTIONS[kind] if term or "{term}" not in q]
  question = rng.choice(questions).format(name=item.name, term=term)
  rag = rng.choice(RAG_TEMPLATES).format(text=passage, question=question)
  return [("extraction", extraction), ("rag", rag)]
