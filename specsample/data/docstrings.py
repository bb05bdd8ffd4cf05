"""A summarization task built offline from real text: Python functions -> their docstring.

The input is the source of a standard-library function or class with its docstring removed
(`ast.unparse`, newlines and indentation collapsed to single spaces, cut to
`MAX_CODE_CHARACTERS`); the target is the docstring's first sentence ("Return the
canonical path of the specified filename."). Like CNN/DM (article -> highlights) it maps
a long input to a short abstract of it, and it is on every machine with Python.

Functions, methods and classes all count. `build_examples` walks the standard library in
file-name order and splits deterministically by a hash of the target sentence (a sentence
never lands in two splits): ~2% test, ~2% validation, the rest train. Records are
`{"code", "docstring", "module", "name"}`; `write_jsonl` / `read_jsonl` store them one
JSON object per line.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import json
import os
import re
import sysconfig
import warnings
from collections.abc import Iterable, Iterator

from specsample.files import replacing

SPLITS = ("train", "validation", "test")
MAX_CODE_CHARACTERS = 600
MIN_WORDS, MAX_WORDS = 3, 32
# Not library code: tests, demos, vendored or generated trees.
SKIPPED_DIRECTORIES = frozenset(
  {"test", "tests", "idle_test", "site-packages", "dist-packages", "__pycache__", "turtledemo",
   "lib2to3", "ensurepip", "__phello__"}
)  # fmt: skip
_SENTENCE_END = re.compile(r"(?<=[.!?])\s")


@dataclasses.dataclass(frozen=True)
class Example:
  code: str  # the function without its docstring, on one line
  docstring: str  # the first sentence of its docstring
  module: str  # path relative to the standard library, e.g. "os.py"
  name: str  # qualified name inside the module, e.g. "Popen.wait"

  def to_json(self) -> str:
    return json.dumps(dataclasses.asdict(self), ensure_ascii=False)


def first_sentence(docstring: str) -> str | None:
  """The first sentence of the first paragraph, whitespace collapsed; None when unusable.

  >>> first_sentence("Return the path.\\n\\n  More detail.")
  'Return the path.'
  """
  paragraph = docstring.strip().split("\n\n", 1)[0]
  text = " ".join(paragraph.split())
  text = _SENTENCE_END.split(text, 1)[0]
  words = text.split()
  if not (MIN_WORDS <= len(words) <= MAX_WORDS) or not text[0].isalpha() or ">>>" in text:
    return None
  return text


def code_without_docstring(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> str:
  """The definition's source with its docstrings (its own and those of nested functions
  and classes) removed, on one line."""
  clone = ast.parse(ast.unparse(node)).body[0]
  for inner in ast.walk(clone):
    definition = isinstance(inner, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
    if definition and ast.get_docstring(inner, clean=False) is not None:
      inner.body = inner.body[1:] or [ast.Pass()]
  return " ".join(ast.unparse(clone).split())[:MAX_CODE_CHARACTERS]


def _functions(tree: ast.AST, prefix: str = "") -> Iterator[tuple[str, ast.AST]]:
  for child in ast.iter_child_nodes(tree):
    if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
      yield prefix + child.name, child
      yield from _functions(child, prefix + child.name + ".")


def module_examples(path: str, module: str) -> Iterator[Example]:
  """The usable (function, first docstring sentence) examples of one source file."""
  try:
    with open(path, encoding="utf-8") as f:
      source = f.read()
    with warnings.catch_warnings():
      warnings.simplefilter("ignore")  # invalid escape sequences in old modules
      tree = ast.parse(source)
  except (SyntaxError, UnicodeDecodeError, ValueError):
    return
  for name, node in _functions(tree):
    docstring = ast.get_docstring(node)
    sentence = first_sentence(docstring) if docstring else None
    if sentence is None:
      continue
    yield Example(code_without_docstring(node), sentence, module, name)


def split_of(docstring: str) -> str:
  """Deterministic split from the target text: 2% test, 2% validation, 96% train (the same
  sentence never lands in two splits)."""
  bucket = int(hashlib.sha256(docstring.encode("utf-8")).hexdigest()[:8], 16) % 50
  return "test" if bucket == 0 else "validation" if bucket == 1 else "train"


def source_files(root: str) -> Iterator[tuple[str, str]]:
  """(absolute path, path relative to `root`) of the .py files, sorted, skipping tests."""
  for directory, subdirectories, files in os.walk(root):
    subdirectories[:] = sorted(d for d in subdirectories if d not in SKIPPED_DIRECTORIES)
    for name in sorted(files):
      if name.endswith(".py"):
        path = os.path.join(directory, name)
        yield path, os.path.relpath(path, root)


def build_examples(root: str | None = None) -> dict[str, list[Example]]:
  """All examples of the standard library at `root` (default: this Python's), by split.

  Duplicated (code, docstring) pairs keep their first occurrence.
  """
  root = root or sysconfig.get_paths()["stdlib"]
  if not os.path.isdir(root):
    raise FileNotFoundError(f"{root}: no such directory")
  seen: set[tuple[str, str]] = set()
  splits: dict[str, list[Example]] = {name: [] for name in SPLITS}
  for path, module in source_files(root):
    for example in module_examples(path, module):
      key = (example.code, example.docstring)
      if key in seen:
        continue
      seen.add(key)
      splits[split_of(example.docstring)].append(example)
  return splits


def write_jsonl(examples: Iterable[Example], path: str) -> int:
  count = 0
  with replacing(path) as temporary, open(temporary, "w", encoding="utf-8") as f:
    for example in examples:
      f.write(example.to_json() + "\n")
      count += 1
  return count


def read_jsonl(path: str) -> list[Example]:
  with open(path, encoding="utf-8") as f:
    return [Example(**json.loads(line)) for line in f if line.strip()]
