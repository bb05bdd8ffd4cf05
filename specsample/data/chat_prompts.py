"""Chat prompts built offline from text every Debian machine with Python has.

The prompts of the SmolLM2 draft's distillation (scripts/train/train_smollm2_draft.py) and of its
bench set (`specsample/bundled/smollm2/prompts.jsonl`): user messages for an instruct
model, in varied task templates over real text:

- Python standard-library functions (`ast`): explain this code, what does this function
  do, write a docstring (the docstring removed); long docstrings: summarize, rewrite,
  key points;
- man pages (`/usr/share/man/man{1,5,8}`, gzipped roff; NAME and DESCRIPTION, markup
  stripped): summarize, rewrite in plain words, key points, what is this command for;
- gettext messages (the English msgids of `/usr/share/locale/de/LC_MESSAGES/*.mo`): what
  does this error mean, translate, reword;
- license texts (`/usr/share/common-licenses/*`, `/usr/share/doc/*/copyright`):
  summarize, plain words, key points, short questions;
- general chat questions from templates written here (advice, explanations, comparisons,
  short writing tasks);
- the task families of `task_families`, for Spec-Bench's other categories: "math",
  "reasoning", "roleplay", "writing", "stem", "humanities" (generated from templates and
  word lists, problems with seeded numbers), and over the quoted texts above "extraction"
  (options, names, dates, JSON, a table) and "rag" (answer from the quoted context alone).

Everything is deterministic: files are read in sorted order, and `build_prompts(split,
seed)` draws from the split with its own seed. The split is by SOURCE (a module, a man
page, a catalog, a license file, a template, a role, a topic), from a hash of its name:
the held-out split (~10%) never shares a source with the train split. TASK_WEIGHTS (the
default) weighs the first nine tasks as it always did; TRAINING_MIX weighs every task about
as Spec-Bench does (`build_prompts(..., weights=TRAINING_MIX)`).

Licences: the Python standard library (PSF License); man pages and /usr/share/doc copyright
files (each package's own, mostly GPL, BSD or MIT); gettext catalogs (their packages',
mostly GPL or LGPL); the license texts themselves; the templates and word lists of this
repository (Apache-2.0).
"""

from __future__ import annotations

import ast
import dataclasses
import glob
import gzip
import hashlib
import json
import os
import random
import re
import sysconfig
import textwrap
import warnings
from collections.abc import Iterator

from specsample.data import task_families
from specsample.data.chat_templates import CHAT_TEMPLATES, FILLERS, TASK_TEMPLATES
from specsample.files import replacing

SPLITS = ("train", "held_out")
TASKS = ("chat", "explain_code", "docstring", "summarize", "rewrite", "key_points", "question",
         "error", "translate") + task_families.FAMILY_TASKS  # fmt: skip
# Share of each task in a drawn set (renormalised over the tasks a split has). The default
# mix: the nine quoted-text and chat tasks only, unchanged (benchmarks' prompts depend on it).
TASK_WEIGHTS = {"chat": 0.2, "explain_code": 0.16, "docstring": 0.07, "summarize": 0.15,
                "rewrite": 0.12, "key_points": 0.09, "question": 0.09, "error": 0.07,
                "translate": 0.05}  # fmt: skip
# The training mix over every task (task_families.SPEC_BENCH_TASKS: which stand for which
# Spec-Bench category). Spec-Bench's six parts weigh a sixth each (translation,
# summarization, QA, math, RAG: 80 questions each; MT-bench's eight categories: 10 each);
# MT-bench's part is raised to ~0.31 here, so that each of its categories gets 3-7% of the
# prompts rather than ~2% (math: GSM8K's and MT-bench's).
TRAINING_MIX = {"writing": 0.05, "roleplay": 0.04, "reasoning": 0.04, "explain_code": 0.03,
                "docstring": 0.015, "question": 0.025, "extraction": 0.03, "stem": 0.04,
                "humanities": 0.04, "translate": 0.13, "summarize": 0.10, "key_points": 0.03,
                "rewrite": 0.02, "chat": 0.12, "error": 0.02, "math": 0.14,
                "rag": 0.13}  # fmt: skip
# Messages that report a problem (the "error" task); other messages are only translated.
_ERROR_WORDS = re.compile(
  r"\b(cannot|can't|could not|couldn't|failed|failure|invalid|error|unable|not found|no such|"
  r"denied|missing|unknown|too many|unexpected|not allowed|illegal|bad|refused|corrupt)\b",
  re.IGNORECASE,
)
MAN_FAMILY_LIMIT = 12  # pages per name family (gcloud_*, git-*, ...) at most
MAN_SECTIONS = ("man1", "man5", "man8")
SKIPPED_DIRECTORIES = frozenset(
  {"test", "tests", "idle_test", "site-packages", "dist-packages", "__pycache__", "turtledemo",
   "lib2to3", "ensurepip", "__phello__"}
)  # fmt: skip


@dataclasses.dataclass(frozen=True)
class ChatPrompt:
  task: str  # one of TASKS
  prompt: str  # the user message (the chat template is applied when it is used)
  source: str  # "python:os.py", "man:ls", "gettext:coreutils", "license:GPL-3", "chat:12",
  # "math:7", "roleplay:a pirate", "stem:physics:friction" (task_families)

  def to_json(self) -> str:
    return json.dumps(dataclasses.asdict(self), ensure_ascii=False)

  @classmethod
  def from_json(cls, line: str) -> ChatPrompt:
    record = json.loads(line)
    return cls(record["task"], record["prompt"], record.get("source", ""))


@dataclasses.dataclass(frozen=True)
class PromptSources:
  """Where the text comes from; the limits keep small runs (tests) fast."""

  stdlib_root: str | None = None  # None: this Python's standard library
  man_root: str = "/usr/share/man"
  catalog_dir: str = "/usr/share/locale/de/LC_MESSAGES"
  license_dir: str = "/usr/share/common-licenses"
  doc_dir: str = "/usr/share/doc"
  max_files: int | None = None  # per kind of source (None: all)
  max_characters: int = 1100  # of the quoted text (~300 tokens)
  held_out_percent: int = 10


@dataclasses.dataclass(frozen=True)
class Item:
  kind: str  # "code", "text", "message"
  source: str
  text: str
  name: str = ""  # a function, command or license name
  extra: str = ""  # code: the function without its docstring; man: the NAME line


def split_of(source: str, held_out_percent: int = 10) -> str:
  """The split of a source, from its name alone (stable across seeds and machines)."""
  bucket = int(hashlib.sha256(source.encode("utf-8")).hexdigest()[:8], 16) % 100
  return "held_out" if bucket < held_out_percent else "train"


def _cut(text: str, limit: int) -> str:
  """`text` cut to at most `limit` characters, at a paragraph or sentence end if one is near."""
  if len(text) <= limit:
    return text
  head = text[:limit]
  for mark in ("\n\n", ". ", "\n"):
    end = head.rfind(mark)
    if end > limit // 2:
      return head[: end + (1 if mark == ". " else 0)].rstrip()
  return head.rsplit(" ", 1)[0]


def _sorted_files(pattern: str, limit: int | None) -> list[str]:
  return sorted(glob.glob(pattern))[:limit]


def python_items(sources: PromptSources) -> Iterator[Item]:
  """Functions of the standard library with a docstring (at most 12 per module), and
  their long docstrings as texts."""
  root = sources.stdlib_root or sysconfig.get_paths()["stdlib"]
  files = []
  for directory, subdirectories, names in os.walk(root):
    subdirectories[:] = sorted(d for d in subdirectories if d not in SKIPPED_DIRECTORIES)
    files += [os.path.join(directory, n) for n in sorted(names) if n.endswith(".py")]
  for path in files[: sources.max_files]:
    module = os.path.relpath(path, root)
    try:
      with open(path, encoding="utf-8") as f:
        source = f.read()
      with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tree = ast.parse(source)
    except (SyntaxError, UnicodeDecodeError, ValueError):
      continue
    lines, count = source.splitlines(), 0
    for node in ast.walk(tree):
      if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) or count >= 12:
        continue
      docstring = ast.get_docstring(node)
      code = textwrap.dedent("\n".join(lines[node.lineno - 1 : node.end_lineno]))
      if not docstring or not 120 <= len(code) <= sources.max_characters:
        continue
      body = node.body[0]
      kept = lines[node.lineno - 1 : body.lineno - 1] + lines[body.end_lineno : node.end_lineno]
      bare = textwrap.dedent("\n".join(kept))
      count += 1
      yield Item("code", f"python:{module}", code, node.name, bare)
      if len(docstring) >= 250:
        yield Item("text", f"python:{module}", _cut(docstring, sources.max_characters), node.name)


# fmt: off
_FONT_MACROS = frozenset(
  "B I BR IR RB RI BI IB SM SB Nm Ar Fl Pa Cm Em Sy Li Dq Sq Ql Xr Va Ev Ic".split()  # noqa: SIM905
)
_BREAK_MACROS = frozenset("PP P LP TP IP HP sp br Pp Bl El It".split())  # noqa: SIM905
_ESCAPES = [(r"\\f(\[[^\]]*\]|\(..|.)", ""), (r"\\s[+-]?\d", ""), (r"\\\((em|en)", "-"),
            (r"\\\((lq|rq)", '"'), (r"\\\((aq|cq|oq)", "'"), (r"\\\(bu", "*"),
            (r"\\\*\(..|\\\*.", ""), (r"\\[-]", "-"), (r"\\[&,/%|^]", ""), (r"\\e", "\\\\"),
            (r"\\ ", " "), (r"\\\(..", ""), (r"\\.", "")]
_ESCAPES = [(re.compile(pattern), replacement) for pattern, replacement in _ESCAPES]
# fmt: on


def strip_roff(lines: list[str]) -> str:
  """Plain text of roff/mdoc source lines: font macros keep their words, paragraph macros
  become blank lines, other requests and comments go, escapes are resolved or dropped."""
  out: list[str] = []
  for line in lines:
    if line.startswith(('.\\"', "'\\\"", '.\\"')):
      continue
    if line.startswith((".", "'")):
      macro, _, rest = line[1:].partition(" ")
      if macro in _FONT_MACROS:
        line = rest.replace('"', "")
        line = "-" + line if macro == "Fl" else line
      elif macro in _BREAK_MACROS:
        out.append("")
        line = rest.replace('"', "") if macro in ("IP", "It") else ""
      else:
        continue
    for pattern, replacement in _ESCAPES:
      line = pattern.sub(replacement, line)
    out.append(line)
  paragraphs = [" ".join(p.split()) for p in "\n".join(out).split("\n\n")]
  return "\n\n".join(p for p in paragraphs if p)


def _section(lines: list[str], name: str) -> list[str]:
  start = None
  for i, line in enumerate(lines):
    heading = line[4:].strip().strip('"').upper() if line[:4] in (".SH ", ".Sh ") else None
    if start is None and heading == name:
      start = i + 1
    elif start is not None and heading is not None:
      return lines[start:i]
  return lines[start:] if start is not None else []


def man_items(sources: PromptSources) -> Iterator[Item]:
  """The DESCRIPTION of each man page (its NAME line as `extra`)."""
  paths = []
  for section in MAN_SECTIONS:
    paths += _sorted_files(os.path.join(sources.man_root, section, "*.gz"), sources.max_files)
  families: dict[str, int] = {}
  for path in paths:
    name = os.path.basename(path)[: -len(".gz")].rsplit(".", 1)[0]
    family = re.split(r"[_.-]", name, maxsplit=1)[0]
    if families.get(family, 0) >= MAN_FAMILY_LIMIT:
      continue
    try:
      with gzip.open(path, "rt", encoding="utf-8", errors="replace") as f:
        lines = f.read().splitlines()
    except (OSError, EOFError):
      continue
    if not lines or lines[0].startswith(".so "):
      continue
    description = strip_roff(_section(lines, "DESCRIPTION"))
    if len(description) < 200:
      continue
    heading = strip_roff(_section(lines, "NAME")).split("\n\n")[0]
    families[family] = families.get(family, 0) + 1
    yield Item("text", f"man:{name}", _cut(description, sources.max_characters), name, heading)


def message_items(sources: PromptSources) -> Iterator[Item]:
  """English program messages (gettext msgids) of 25..200 characters, one line each."""
  from specsample.data.gettext_pairs import read_catalog

  for path in _sorted_files(os.path.join(sources.catalog_dir, "*.mo"), sources.max_files):
    domain = os.path.basename(path)[: -len(".mo")]
    seen = set()
    for english, _ in read_catalog(path):
      text = " ".join(english.split())
      if "\n" in english.strip() or not 25 <= len(text) <= 200 or text in seen:
        continue
      if sum(c.isalpha() for c in text) < 0.6 * len(text):
        continue
      seen.add(text)
      yield Item("message", f"gettext:{domain}", text, domain)


def license_items(sources: PromptSources) -> Iterator[Item]:
  """Paragraphs (>= 200 characters) of license texts and packages' copyright files; a
  paragraph seen before (the same license in another file) is skipped."""
  licenses = _sorted_files(os.path.join(sources.license_dir, "*"), sources.max_files)
  copyrights = _sorted_files(os.path.join(sources.doc_dir, "*", "copyright"), sources.max_files)
  seen: set[str] = set()
  for path in licenses + copyrights:
    is_license = path in licenses
    name = os.path.basename(path) if is_license else os.path.basename(os.path.dirname(path))
    try:
      with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    except OSError:
      continue
    count = 0
    for block in re.split(r"\n\s*\n", text):
      paragraph = " ".join(line.strip(" .\t") if line.strip() == "." else line.strip()
                           for line in block.splitlines())  # fmt: skip
      paragraph = " ".join(paragraph.split())
      letters = sum(c.isalpha() for c in paragraph)
      if len(paragraph) < 200 or letters < 0.7 * len(paragraph) or paragraph in seen:
        continue
      seen.add(paragraph)
      count += 1
      if count > (8 if is_license else 3):
        break
      kind = "license" if is_license else "copyright"
      yield Item("text", f"{kind}:{name}", _cut(paragraph, sources.max_characters), name)


def chat_items() -> Iterator[tuple[str, str]]:
  """(source, prompt) of every general chat template, once per filler of its first slot
  (further slots take fillers in turn)."""
  for number, template in enumerate(CHAT_TEMPLATES):
    slots = list(dict.fromkeys(re.findall(r"\{(\w+)\}", template)))
    if not slots:
      yield f"chat:{number}", template
      continue
    for i, filler in enumerate(FILLERS[slots[0]]):
      prompt = template.replace("{" + slots[0] + "}", filler)
      for j, slot in enumerate(slots[1:], 1):
        prompt = prompt.replace("{" + slot + "}", FILLERS[slot][(i + j) % len(FILLERS[slot])])
      yield f"chat:{number}", prompt


def _prompts_of(item: Item, rng: random.Random) -> list[ChatPrompt]:
  """One prompt per task this item can serve (each in a template drawn by `rng`)."""
  if item.kind == "code":
    tasks = {"explain_code": item.text, "docstring": item.extra, "question": item.text}
  elif item.kind == "message":
    tasks = {"translate": item.text}
    if _ERROR_WORDS.search(item.text):
      tasks["error"] = item.text
  else:
    tasks = {t: item.text for t in ("summarize", "rewrite", "key_points", "question")}
  prompts = []
  for task, text in tasks.items():
    key = f"{item.kind}:{task}" if f"{item.kind}:{task}" in TASK_TEMPLATES else f"text:{task}"
    if item.source.startswith("man:") and task == "question":
      key = "man:question"
    template = rng.choice(TASK_TEMPLATES[key])
    prompt = template.format(text=text, name=item.name, heading=item.extra)
    prompts.append(ChatPrompt(task, prompt, item.source))
  return prompts


def candidates(split: str, sources: PromptSources = PromptSources(), seed: int = 0):
  """Every prompt of the split, by task: {task: [ChatPrompt, ...]} (templates drawn with
  `seed`).

  The first nine tasks draw from `rng` exactly as before the task families came; those
  draw from RNGs of their own, so that the old tasks' prompts stay the same."""
  if split not in SPLITS:
    raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
  rng = random.Random(seed)
  passage_rng = random.Random(f"task_families|{seed}")  # extraction and rag
  by_task: dict[str, list[ChatPrompt]] = {task: [] for task in TASKS}
  readers = (python_items, man_items, message_items, license_items)
  for reader in readers:
    for item in reader(sources):
      if split_of(item.source, sources.held_out_percent) == split:
        for prompt in _prompts_of(item, rng):
          by_task[prompt.task].append(prompt)
        for task, prompt in task_families.passage_prompts(item, passage_rng):
          by_task[task].append(ChatPrompt(task, prompt, item.source))
  for source, prompt in chat_items():
    if split_of(source, sources.held_out_percent) == split:
      by_task["chat"].append(ChatPrompt("chat", prompt, source))

  def in_split(source: str) -> bool:
    return split_of(source, sources.held_out_percent) == split

  for task, source, prompt in task_families.generated_prompts(seed, in_split):
    by_task[task].append(ChatPrompt(task, prompt, source))
  return by_task


def build_prompts(
  split: str, count: int, *, seed: int = 0, sources: PromptSources = PromptSources(),
  weights: dict[str, float] | None = None,
) -> list[ChatPrompt]:  # fmt: skip
  """`count` prompts of the split in TASK_WEIGHTS proportions (or `weights`, e.g.
  TRAINING_MIX for every task), shuffled.

  A task with too few candidates gives what it has (the rest is drawn from the other
  tasks). No prompt appears twice.
  """
  by_task = candidates(split, sources, seed)
  weights = {t: w for t, w in (weights or TASK_WEIGHTS).items() if by_task.get(t)}
  total = sum(weights.values())
  rng = random.Random(seed + 1)
  chosen: list[ChatPrompt] = []
  for task, weight in weights.items():
    pool = by_task[task]
    take = min(len(pool), round(count * weight / total))
    chosen += rng.sample(pool, take)
  if len(chosen) < count:  # rounding, or tasks short of candidates
    taken = set(chosen)
    rest = [p for task in weights for p in by_task[task] if p not in taken]
    chosen += rng.sample(rest, min(len(rest), count - len(chosen)))
  rng.shuffle(chosen)
  return chosen[:count]


def write_jsonl(prompts: list[ChatPrompt], path: str, *, with_source: bool = True) -> None:
  with replacing(path) as temporary, open(temporary, "w", encoding="utf-8") as f:
    for prompt in prompts:
      record = dataclasses.asdict(prompt)
      if not with_source:
        del record["source"]
      f.write(json.dumps(record, ensure_ascii=False) + "\n")


def read_jsonl(path: str) -> list[ChatPrompt]:
  with open(path, encoding="utf-8") as f:
    return [ChatPrompt.from_json(line) for line in f if line.strip()]
