"""The eval's user-facing failures, and how the scripts report them: one line, an exit code.

`ConfigError` is an eval that cannot start as configured (a bad field, a missing file or
checkpoint, an unknown task, a workdir holding other results); `MissingExtraError` is an
install without the eval extra. `run_command` runs a script's body and turns these, and
Ctrl-C, into one line on stderr and an exit code (2, and 130 for an interruption).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Callable, Iterable, Sequence

# The modules of the eval extra (pyproject.toml: specsample[eval]).
EXTRA_MODULES = ("seqio", "tensorflow", "tensorflow_datasets", "rouge_score")
INSTALL_EXTRA = 'pip install -e ".[eval]"'
CONFIG_EXIT = 2
INTERRUPTED_EXIT = 130  # 128 + SIGINT, as shells report it


class ConfigError(ValueError):
  """The eval cannot start as configured; the message says what to change."""


class MissingExtraError(ConfigError):
  """A module of the eval extra is not installed."""


def missing_extra_message(modules: str | Sequence[str]) -> str:
  """The message for missing modules of the eval extra, naming every one of them (a user
  then sees that one install fixes them all)."""
  names = [modules] if isinstance(modules, str) else list(modules)
  listed = names[-1] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
  verb = "is" if len(names) == 1 else "are"
  return (
    f"{listed} {verb} not installed; the eval needs the eval extra (seqio, TensorFlow, TFDS, "
    f"rouge-score): {INSTALL_EXTRA}"
  )


def missing_modules(names: Iterable[str]) -> list[str]:
  """The `names` that cannot be imported, in order (looked up without importing them:
  TensorFlow takes seconds to import)."""
  missing = []
  for name in names:
    try:
      found = importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a parent package missing, or no __spec__
      found = False
    if not found:
      missing.append(name)
  return missing


def require_modules(names: Iterable[str]) -> None:
  """Raises MissingExtraError naming every one of `names` that cannot be imported."""
  missing = missing_modules(names)
  if missing:
    raise MissingExtraError(missing_extra_message(missing))


def _extra_module(error: BaseException) -> str | None:
  """The eval-extra module whose import failed, if that is what `error` is."""
  if isinstance(error, ModuleNotFoundError) and error.name:
    top = error.name.split(".")[0]
    return top if top in EXTRA_MODULES else None
  return None


def one_line(text: str) -> str:
  return " ".join(part.strip() for part in str(text).strip().splitlines() if part.strip())


def run_command(
  prog: str,
  body: Callable[[], int],
  resume_path: Callable[[], str | None],
  usage_errors: tuple[type[BaseException], ...] = (),
) -> int:
  """Runs `body` and returns its exit code. A ConfigError (or one of `usage_errors`, e.g.
  flag parsing errors) prints `prog: message` and returns 2; a missing eval-extra module
  prints how to install it and returns 2; Ctrl-C prints that rerunning resumes from
  `resume_path()` (the results file of the run in progress) and returns 130. Anything
  else is a bug and propagates with its traceback."""
  try:
    return body()
  except KeyboardInterrupt:
    path = resume_path()
    where = f"from {path}" if path else "where it stopped"
    kept = "finished examples are kept"
    print(
      f"{prog}: interrupted; rerun the same command to resume {where} ({kept})", file=sys.stderr
    )
    return INTERRUPTED_EXIT
  except (ConfigError, *usage_errors) as error:
    print(f"{prog}: {one_line(error)}", file=sys.stderr)
    return CONFIG_EXIT
  except ImportError as error:
    module = _extra_module(error)
    if module is None:
      raise
    print(f"{prog}: {missing_extra_message(module)}", file=sys.stderr)
    return CONFIG_EXIT


def examples_path(workdir: str) -> str:
  """Where run_eval keeps a run's finished examples."""
  return os.path.join(workdir, "examples.jsonl")
