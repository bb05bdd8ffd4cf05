"""scripts/eval.py and scripts/miniature.py fail in one line with an exit code: 2 for a
config error or a missing eval extra, 130 for Ctrl-C. No TensorFlow is imported here:
every case fails before the data is read (make_task is replaced to make sure)."""

from __future__ import annotations

import importlib.util
import os
import pathlib
import re
import subprocess
import sys

import pytest

from specsample.eval import errors, runner
from specsample.eval import eval_command as eval_script
from specsample.eval import miniature_command as miniature_script
from specsample.eval.errors import ConfigError, MissingExtraError, run_command

ROOT = pathlib.Path(__file__).resolve().parents[1]
MINIATURE = str(ROOT / "configs" / "miniature_ende.py")
TABLE2 = str(ROOT / "configs" / "table2" / "ende_t5_small_t0.py")
INSTALL = 'pip install -e ".[eval]"'
EXTRA = ("seqio", "tensorflow", "tensorflow_datasets")  # rouge_score is in the test extra too


def not_importable(names) -> list[str]:
  """Those of `names` this process cannot import (hidden ones included)."""
  return [name for name in names if importlib.util.find_spec(name) is None]


def named_missing(line: str, prog: str) -> list[str]:
  """The modules a "PROG: a, b and c are not installed; ..." line names."""
  assert line.startswith(f"{prog}: ") and " not installed; " in line, line
  listed = line.removeprefix(f"{prog}: ").split(" not installed; ")[0]
  return re.split(r", | and ", listed.removesuffix(" is").removesuffix(" are"))


# ml_collections loads config files with a deprecated importlib call.
pytestmark = pytest.mark.filterwarnings("ignore:the load_module:DeprecationWarning")


@pytest.fixture(autouse=True)
def no_data(monkeypatch):
  """Fails a test that would build the seqio task (TensorFlow stays out of this process)."""

  def guarded(pipeline):
    runner.require_modules(runner.extra_modules(pipeline))  # the real check of the extra
    raise AssertionError("the seqio task was built: the error was not caught before")

  monkeypatch.setattr(runner, "make_task", guarded)


def one_line(capsys) -> str:
  err = capsys.readouterr().err
  lines = err.strip().splitlines()
  assert len(lines) == 1, err
  return lines[0]


@pytest.mark.parametrize(
  ("args", "message"),
  [  # one refused command line a row, alike in shape: each flag has its own message
    ([], "eval.py: flag --config=None: Flag --config must have a value other than None."),
    (["--config=configs/nope.py"], "No such file or directory: 'configs/nope.py'"),
    ([f"--config={MINIATURE}", "--bogus"], "eval.py: Unknown command line flag 'bogus'"),
    ([f"--config={MINIATURE}", "--config.gamma=0"], "eval.py: gamma must be an integer >= 1"),
    ([f"--config={MINIATURE}", "--config.gamma=abc"], "eval.py: flag --config.gamma=abc: "),
    ([f"--config={MINIATURE}", "--config.temperature=-1"], "temperature must be >= 0"),
    ([f"--config={MINIATURE}", "--config.temperature=nan"], "temperature must be a finite"),
    ([f"--config={MINIATURE}", "--config.gamma=100"], "eval.py: gamma must be <= 64"),
    ([f"--config={MINIATURE}", "--config.source=csv"], "eval.py: source must be one of"),
    ([f"--config={MINIATURE}", "--config.nofield=1"], "eval.py: the config has no field 'nofield'"),
    ([f"--config={MINIATURE}", "--config.task=xsum"], "eval.py: unknown task 'xsum'"),
    ([f"--config={MINIATURE}", "--config.paper_row=x"], "eval.py: unknown paper row"),
    ([f"--config={MINIATURE}", "--config.target.hf=/nope"], "target: /nope is not a Hugging Face"),
    ([f"--config={TABLE2}", "--config.checkpoint_format=hf"], "target: no hf checkpoint path"),
    (
      [f"--config={TABLE2}", "--config.draft.t5x=/nope/checkpoint"],
      "eval.py: draft checkpoint /nope/checkpoint: no such file or directory",
    ),
    (
      [f"--config={TABLE2}", "--config.draft.t5x=/nope/checkpoint", "--dry_run"],
      "eval.py: draft checkpoint /nope/checkpoint: no such file or directory",
    ),
    (
      [f"--config={MINIATURE}", "--config.source=jsonl", "--config.data_files="],
      "source 'jsonl' needs --config.data_files",
    ),
  ],
)
def test_eval_config_errors_are_one_line_and_exit_2(capsys, tmp_path, args, message):
  argv = ["eval.py", *args]
  if any(arg.startswith("--config=") for arg in args):
    argv.append(f"--config.workdir={tmp_path}")  # overrides come after --config
  assert eval_script.main(argv) == 2
  line = one_line(capsys)
  assert line.startswith("eval.py: ") and message in line
  assert not (tmp_path / "examples.jsonl").exists()


def interrupt(*args, **kwargs):
  raise KeyboardInterrupt


def test_eval_interrupted_says_how_to_resume(capsys, tmp_path, monkeypatch):
  monkeypatch.setattr(runner, "run_eval", interrupt)
  code = eval_script.main(["eval.py", f"--config={MINIATURE}", f"--config.workdir={tmp_path}"])
  assert code == 130
  line = one_line(capsys)
  assert line.startswith("eval.py: interrupted; rerun the same command to resume from ")
  assert line.endswith(f"{tmp_path / 'examples.jsonl'} (finished examples are kept)")


ROUGE_CONFIG = str(ROOT / "configs" / "miniature_docstrings.py")  # a ROUGE task


@pytest.mark.parametrize(
  ("hidden", "config"),
  [
    ("seqio", MINIATURE),
    ("tensorflow", MINIATURE),
    ("tensorflow_datasets", MINIATURE),
    ("rouge_score", ROUGE_CONFIG),
  ],
)
@pytest.mark.parametrize("dry_run", [True, False])
def test_eval_without_a_module_of_the_extra_names_every_missing_one(
  capsys, tmp_path, monkeypatch, hidden, config, dry_run
):
  """One module hidden: the message names it and every other module of the extra this
  install lacks (with the extra: the hidden one alone; without: seqio's three too)."""
  monkeypatch.setitem(sys.modules, hidden, None)  # `import <hidden>` fails
  needed = (*EXTRA, "rouge_score") if config == ROUGE_CONFIG else EXTRA
  argv = ["eval.py", f"--config={config}", f"--config.workdir={tmp_path}"]
  assert eval_script.main(argv + ["--dry_run"] * dry_run) == 2
  line = one_line(capsys)
  assert named_missing(line, "eval.py") == not_importable(needed)
  assert hidden in named_missing(line, "eval.py") and line.endswith(INSTALL)


@pytest.mark.parametrize("config", [MINIATURE, ROUGE_CONFIG])
def test_eval_in_an_install_without_the_extra_names_all_its_modules(
  capsys, tmp_path, monkeypatch, config
):
  """The README's install (`.[dev]`: rouge-score, no seqio or TensorFlow), in any install."""
  for name in EXTRA:
    monkeypatch.setitem(sys.modules, name, None)
  assert eval_script.main(["eval.py", f"--config={config}", f"--config.workdir={tmp_path}"]) == 2
  line = one_line(capsys)
  assert line.startswith("eval.py: seqio, tensorflow and tensorflow_datasets are not installed;")
  assert line.endswith(INSTALL)


@pytest.mark.parametrize(
  ("args", "message"),
  [
    (["--tasks", "xsum"], "miniature.py: unknown miniature 'xsum'; known: ['docstrings', 'ende']"),
    (["--gammas", "2", "0"], "miniature.py: gamma must be an integer >= 1, got 0"),
    (["--temperatures", "-1"], "miniature.py: temperature must be >= 0"),
    (["--temperatures", "nan"], "miniature.py: temperature must be a finite number >= 0"),
    (["--gammas", "100"], "miniature.py: gamma must be <= 64"),
    (["--gammas", "x"], "miniature.py: argument --gammas: invalid int value: 'x'"),
    (["--bogus"], "miniature.py: unrecognized arguments: --bogus"),
  ],
)
def test_miniature_config_errors_are_one_line_and_exit_2(capsys, tmp_path, args, message):
  assert miniature_script.main([*args, "--out", str(tmp_path)]) == 2
  assert one_line(capsys).startswith(message)
  assert list(tmp_path.iterdir()) == []  # checked before any run started


def test_miniature_interrupted_names_the_run_to_resume(capsys, tmp_path, monkeypatch):
  monkeypatch.setattr(runner, "load_models", interrupt)
  monkeypatch.setattr(miniature_script, "require_modules", lambda names: None)
  assert miniature_script.main(["--tasks", "ende", "--out", str(tmp_path)]) == 130
  line = one_line(capsys)
  assert line.startswith("miniature.py: interrupted; rerun the same command to resume from ")
  assert f"{tmp_path / 'ende_t0_g2' / 'examples.jsonl'} (" in line


def test_miniature_without_rouge_says_how_to_install_it(capsys, tmp_path, monkeypatch):
  monkeypatch.setitem(sys.modules, "rouge_score", None)
  assert miniature_script.main(["--out", str(tmp_path)]) == 2
  line = one_line(capsys)
  assert named_missing(line, "miniature.py") == not_importable((*EXTRA, "rouge_score"))
  assert "rouge_score" in named_missing(line, "miniature.py") and INSTALL in line


@pytest.mark.parametrize(
  ("error", "code", "message"),
  [
    (ConfigError("bad\nfield"), 2, "p: bad field"),
    (MissingExtraError(errors.missing_extra_message("seqio")), 2, "p: seqio is not installed"),
    (
      MissingExtraError(errors.missing_extra_message(["seqio", "tensorflow", "rouge_score"])),
      2,
      "p: seqio, tensorflow and rouge_score are not installed; ",
    ),
    # An import of the extra failing inside (a broken install), not caught up front.
    (ModuleNotFoundError("no", name="tensorflow.python"), 2, "p: tensorflow is not installed"),
    (KeyboardInterrupt(), 130, "p: interrupted; rerun the same command to resume from w/x"),
  ],
)
def test_run_command_maps_failures_to_one_line(capsys, error, code, message):
  def body():
    raise error

  assert run_command("p", body, lambda: "w/x") == code
  assert one_line(capsys).startswith(message)


@pytest.mark.parametrize("error", [ModuleNotFoundError("no", name="numpy"), RuntimeError("bug")])
def test_run_command_lets_bugs_through(error):
  def body():
    raise error

  with pytest.raises(type(error)):
    run_command("p", body, lambda: None)


# The scripts as commands (their __main__ and exit status). A case with a set-up runs the
# script's module under `python -c`, after hiding a module or making the run interrupt.
HIDE_SEQIO = "sys.modules['seqio'] = None; "
INTERRUPT = (
  "import specsample.eval.runner as r; "
  "r.run_eval = lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt()); "
)
MODULES = {"eval.py": "eval_command", "miniature.py": "miniature_command"}


def command_line(setup: str, script: str) -> list[str]:
  """The command that runs `script` itself, or its module after `setup` (argv as the script's)."""
  if not setup:
    return [sys.executable, str(ROOT / "scripts" / script)]
  module = f"specsample.eval.{MODULES[script]}"
  code = f"import sys; sys.argv[0] = {script!r}; {setup}from {module} import main; sys.exit(main())"
  return [sys.executable, "-c", code]


@pytest.mark.slow
@pytest.mark.parametrize(
  ("setup", "script", "args", "code", "message"),
  [
    ("", "eval.py", [f"--config={MINIATURE}", "--config.gamma=0"], 2, "eval.py: gamma must be"),
    (HIDE_SEQIO, "eval.py", [f"--config={MINIATURE}", "--dry_run"], 2, "eval.py: seqio"),
    (INTERRUPT, "eval.py", [f"--config={MINIATURE}"], 130, "eval.py: interrupted; rerun"),
    ("", "miniature.py", ["--tasks", "xsum"], 2, "miniature.py: unknown miniature 'xsum'"),
  ],
)
def test_scripts_exit_with_one_line(tmp_path, setup, script, args, code, message):
  workdir = [f"--config.workdir={tmp_path}"] if script == "eval.py" else ["--out", str(tmp_path)]
  result = subprocess.run(
    [*command_line(setup, script), *args, *workdir],
    capture_output=True,
    text=True,
    cwd=ROOT,
    env={**os.environ, "JAX_PLATFORMS": "cpu"},
    timeout=120,
  )
  assert result.returncode == code, result.stderr
  assert result.stderr.strip().splitlines() == [result.stderr.strip()], result.stderr
  assert result.stderr.startswith(message), result.stderr
