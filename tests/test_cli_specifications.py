"""What the `specsample` command promises for bad input, as rules: every input the
arguments alone decide is refused with one line on stderr and exit status 2 before any
model loads or compiles; output paths are made up front and removed when the run fails;
a byte-order mark is no part of an input; Ctrl-C ends any phase with one line and exit
status 130 (run as a real process: no traceback, no segmentation fault)."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest
from cli_runs import run

from specsample.checkpoints import save_hf_decoder_only
from specsample.models import DecoderOnly, DecoderOnlyConfig

ROOT = pathlib.Path(__file__).resolve().parents[1]
SPIECE = ROOT / "specsample" / "bundled" / "ende" / "spiece.model"
CONTEXT = 64  # max_position_embeddings of the tiny target


@pytest.fixture(scope="module")
def tiny_target(tmp_path_factory) -> pathlib.Path:
  """A tiny random decoder-only target with the bundled EN->DE vocabulary (the tokenizer
  is its spiece.model) whose config.json says its context is CONTEXT tokens."""
  directory = tmp_path_factory.mktemp("tiny") / "target"
  config = DecoderOnlyConfig(
    vocab_size=4000, d_model=16, num_heads=2, num_kv_heads=1, head_dim=8, mlp_dim=24,
    num_layers=1, eos_id=1, pad_id=0,
  )  # fmt: skip
  save_hf_decoder_only(DecoderOnly.init_random(config, seed=0), directory)
  config_file = directory / "config.json"
  hf = json.loads(config_file.read_text())
  config_file.write_text(json.dumps({**hf, "max_position_embeddings": CONTEXT}))
  return directory


def tiny_pair(target: pathlib.Path) -> list[str]:
  return ["--target", str(target), "--draft", "ngram", "--tokenizer", str(SPIECE)]


def refused(argv, capsys) -> str:
  """The one stderr line of a command that must exit with status 2."""
  code, err, out = run(argv, capsys)
  assert code == 2, err
  assert len(err) == 1, err
  assert "Traceback" not in err[0] and out == ""
  return err[0]


def must_not_run(*args, **kwargs):
  raise AssertionError("the work started: the input should have been refused before")


@pytest.fixture
def nothing_loads(monkeypatch):
  """Loading any model (pair loaders of generate, translate and bench) fails the test."""
  import specsample.pairs

  monkeypatch.setattr(specsample.pairs, "load_pair", must_not_run)
  monkeypatch.setattr(specsample.pairs, "load_bundled_t5_pair", must_not_run)


@pytest.fixture
def nothing_compiles(monkeypatch):
  """Decoding (and so compiling) fails the test; loading is allowed."""
  import specsample.bench.run
  import specsample.cli.generate

  monkeypatch.setattr(specsample.cli.generate, "compare", must_not_run)
  monkeypatch.setattr(specsample.cli.generate, "tuned_gamma", must_not_run)
  monkeypatch.setattr(specsample.bench.run, "run_bench", must_not_run)


# The model's context.


def test_prompt_longer_than_context_is_refused_before_compiling(
  tiny_target, tmp_path, capsys, nothing_compiles
):
  """The message gives the numbers: the tokenized prompt, max_new_tokens, the context."""
  inputs = tmp_path / "long.txt"
  inputs.write_text(" ".join(["Open the file"] * 40) + "\n")
  argv = ["generate", *tiny_pair(tiny_target), "--input-file", str(inputs), "--max-new-tokens", "8"]
  line = refused(argv, capsys)
  assert "--max-new-tokens is 8" in line and f"context of {CONTEXT}" in line
  assert "max_position_embeddings" in line
  prompt_tokens = int(line.split(" tokens long")[0].rsplit(" ", 1)[1])
  assert prompt_tokens + 8 > CONTEXT


def test_prompt_that_fits_only_without_max_new_tokens_is_refused(
  tiny_target, capsys, nothing_compiles
):
  """The prompt and the tokens to generate share the context of a decoder-only model."""
  line = refused(["generate", *tiny_pair(tiny_target), "Open it", "--max-new-tokens", "60"], capsys)
  assert "--max-new-tokens is 60" in line and f"past the target's context of {CONTEXT}" in line


def test_max_new_tokens_past_the_context_is_refused_before_loading(
  tiny_target, capsys, nothing_loads
):
  argv = ["generate", *tiny_pair(tiny_target), "hi", "--max-new-tokens", "100000"]
  line = refused(argv, capsys)
  assert "--max-new-tokens 100000" in line and f"context of {CONTEXT} tokens" in line
  assert f"at most {CONTEXT - 1}" in line


def test_t5_input_past_512_tokens_is_refused_before_compiling(capsys, nothing_compiles):
  """T5's positions are relative: its limit is the 512 tokens it was trained with."""
  line = refused(["translate", "a" * 2000], capsys)
  assert "tokens long" in line and "context of 512 input tokens" in line


def test_t5_max_new_tokens_past_512_is_refused_before_loading(capsys, nothing_loads):
  line = refused(["translate", "hi", "--max-new-tokens", "513"], capsys)
  assert "--max-new-tokens 513" in line and "at most 512" in line


# Every option, before anything loads.


@pytest.mark.parametrize(
  ("argv", "message"),
  [
    (["bench", "--gammas", "100"], "gamma must be in 1..64"),
    (["bench", "--gammas", "1-100000000"], "gamma must be in 1..64"),
    (["bench", "--temperatures", "nan"], "temperature must be a finite number >= 0"),
    (["bench", "--temperatures", "0", "-1"], "temperature must be a finite number >= 0"),
    (["bench", "--batch-sizes", "0"], "expected positive integers"),
    (["bench", "--repeats", "0"], "expected a positive integer"),
    (["generate", "hi", "--temperature", "inf"], "temperature must be a finite number >= 0"),
    (["generate", "hi", "--top-k", "-1"], "top_k must be >= 0"),
    (["generate", "hi", "--top-p", "1.5"], r"top_p must be in \(0, 1\]"),
    (["generate", "hi", "--top-p", "nan"], r"top_p must be in \(0, 1\]"),
    (["generate", "hi", "--adaptive", "--tree", "2"], "cannot be combined"),
    (["translate", "hi", "--gamma", "65"], "gamma must be in 1..64"),
    (["translate", "hi", "--temperature", "-0.5"], "temperature must be a finite number >= 0"),
    (["demo", "--vocab-size", "2"], "--vocab-size must be in 4..64"),
    (["demo", "--gamma", "100"], "--gamma must be <= 64"),
    (["demo", "--gamma", "0"], "--gamma must be >= 1"),
    (["demo", "--temperature", "0"], "--temperature must be > 0"),
    (["demo", "--temperature", "nan"], "temperature must be a finite number >= 0"),
    (["demo", "--max-new-tokens", "20"], "would enumerate"),
    (["demo", "--samples", "0"], "expected a positive integer"),
    (["demo", "--draft-noise", "nan"], "--draft-noise must be a finite number >= 0"),
  ],
)
def test_every_bad_option_is_refused_before_anything_loads(
  argv, message, tmp_path, capsys, nothing_loads
):
  import re

  out = ["--out", str(tmp_path / "report")] if argv[0] == "bench" else []
  line = refused([*argv, *out], capsys)
  assert re.search(message, line), line
  assert not (tmp_path / "report").exists()


def test_bench_refuses_a_bad_setting_before_making_its_output_directory(
  tmp_path, capsys, monkeypatch
):
  """A combination the settings refuse (checked for every gamma, rule and temperature)."""
  import specsample.decoding

  real = specsample.decoding.SpeculativeSettings.of

  def refuse_gamma_7(**kwargs):
    if kwargs["gamma"] == 7:
      raise ValueError("gamma 7 is refused by this test")
    return real(**kwargs)

  monkeypatch.setattr(specsample.decoding.SpeculativeSettings, "of", refuse_gamma_7)
  line = refused(["bench", "--gammas", "2,7", "--out", str(tmp_path / "new" / "report")], capsys)
  assert line == "specsample bench: gamma 7 is refused by this test"
  assert not (tmp_path / "new").exists()


# Output paths: made up front, removed when the run fails.


@pytest.mark.skipif(not pathlib.Path("/proc/self").exists(), reason="needs Linux's /proc")
def test_an_output_path_that_cannot_be_created_is_refused_before_loading(
  tmp_path, capsys, nothing_loads
):
  """/proc passes a permission check, but nothing can be created in it."""
  line = refused(["translate", "hi", "--trace", "/proc/specsample_trace.html"], capsys)
  assert "--trace /proc/specsample_trace.html cannot be written" in line
  line = refused(["bench", "--out", "/proc/specsample_report"], capsys)
  assert "--out /proc/specsample_report cannot be written" in line


def test_a_failed_run_leaves_no_output_behind(tiny_target, tmp_path, capsys):
  empty = tmp_path / "empty.txt"
  empty.write_text("\n\n")
  out = tmp_path / "new" / "report"
  line = refused(["bench", "--input-file", str(empty), "--out", str(out)], capsys)
  assert "no non-empty lines" in line or "no inputs" in line
  assert not (tmp_path / "new").exists()
  trace = tmp_path / "trace.html"
  line = refused(["generate", *tiny_pair(tiny_target), "hi", "--max-new-tokens", "99", "--trace",
                  str(trace)], capsys)  # fmt: skip
  assert "--max-new-tokens 99" in line and not trace.exists()


def test_an_existing_output_is_kept_when_the_run_fails(tiny_target, tmp_path, capsys):
  trace = tmp_path / "trace.html"
  trace.write_text("kept")
  argv = ["generate", *tiny_pair(tiny_target), "hi", "--max-new-tokens", "99", "--trace",
          str(trace), "--overwrite"]  # fmt: skip
  refused(argv, capsys)
  assert trace.read_text() == "kept"


def test_an_interrupted_run_leaves_no_output_behind(tmp_path, capsys, monkeypatch):
  import specsample.cli.bench

  def interrupted(args):
    assert pathlib.Path(args.out).is_dir()  # made before the work
    raise KeyboardInterrupt

  monkeypatch.setattr(specsample.cli.bench, "run_bench", interrupted)
  code, err, _ = run(["bench", "--out", str(tmp_path / "new" / "report")], capsys)
  assert code == 130 and err == ["specsample bench: interrupted"]
  assert not (tmp_path / "new").exists()


# Inputs.


def test_a_byte_order_mark_is_no_part_of_the_input(tmp_path):
  from specsample.cli.bench import bench_inputs
  from specsample.cli.options import read_inputs

  bom = "\ufeff"
  lines = tmp_path / "inputs.txt"
  lines.write_text(bom + "Open the file\nClose it\n", encoding="utf-8")
  assert read_inputs([], str(lines)) == ["Open the file", "Close it"]
  assert bench_inputs(str(lines), 8) == ["Open the file", "Close it"]
  records = tmp_path / "inputs.jsonl"
  records.write_text(bom + json.dumps({"prompt": "Say hi", "task": "chat"}) + "\n")
  assert bench_inputs(str(records), 8) == ["Say hi"]


# Ctrl-C, in a real process: at any moment, exit status 130 and one line.

# The command as its console script runs it (`main()` reads sys.argv), with a line on
# stdout once specsample and JAX are imported: the signal is timed from there. The signals
# start as in a command typed in a terminal: SIGINT with Python's own handler, SIGTERM and
# SIGHUP at their defaults (a runner may start the tests with some ignored, `nohup` SIGHUP,
# which the child would inherit and, as it should, keep ignoring).
COMMAND = (
  "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
  "signal.signal(signal.SIGTERM, signal.SIG_DFL); signal.signal(signal.SIGHUP, signal.SIG_DFL); "
  "from specsample.cli import main; print('imported', flush=True); sys.exit(main())"
)


def signalled(args: list[str], signum: int, seconds: float, cwd) -> tuple:
  """Runs the command (COMMAND) in `cwd`, sends `signum` `seconds` after its imports;
  -> (the ended process, its stderr)."""
  env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONFAULTHANDLER": "1"}
  process = subprocess.Popen(
    [sys.executable, "-c", COMMAND, *args], cwd=cwd, env=env, stdout=subprocess.PIPE,
    stderr=subprocess.PIPE, text=True,
  )  # fmt: skip
  try:
    assert process.stdout.readline() == "imported\n"
    time.sleep(seconds)
    process.send_signal(signum)
    _, err = process.communicate(timeout=60)
  finally:
    process.kill()
  return process, err


@pytest.mark.slow
@pytest.mark.parametrize("seconds", [0.2, 1.0, 2.5, 4.0, 7.0])
def test_ctrl_c_at_any_moment_exits_130_with_one_line(seconds, tmp_path):
  """SIGINT while parsing, loading, compiling and decoding (the times land in each phase
  of `translate` on a 2-core CPU; every one must end the same way, without the segfault
  of an interpreter teardown racing XLA's compile threads)."""
  args = ["translate", "Could not open file %s", "--repeats", "100000"]
  process, err = signalled(args, signal.SIGINT, seconds, tmp_path)
  assert process.returncode == 130, (process.returncode, err[-3000:])
  assert err.strip().splitlines() == ["specsample translate: interrupted"], err[-3000:]
  assert not list(tmp_path.iterdir())  # no core file, no output


@pytest.mark.slow
@pytest.mark.parametrize(
  "name, line", [("SIGTERM", "terminated (SIGTERM)"), ("SIGHUP", "hung up (SIGHUP)")]
)
@pytest.mark.parametrize("seconds", [0.3, 4.0])
def test_sigterm_and_sighup_are_answered_as_ctrl_c(name, line, seconds, tmp_path):
  """`kill` and a closed terminal, while loading and while compiling or decoding: one
  line, exit status 128 + the signal, and the trace file the run created is gone."""
  signum = getattr(signal, name)
  args = ["translate", "Could not open file %s", "--repeats", "100000", "--trace", "t.html"]
  process, err = signalled(args, signum, seconds, tmp_path)
  assert process.returncode == 128 + signum, (process.returncode, err[-3000:])
  assert err.strip().splitlines() == [f"specsample translate: {line}"], err[-3000:]
  assert not list(tmp_path.iterdir())  # no trace file, no core file


def test_sigterm_while_the_command_is_still_importing_exits_143_with_one_line(tmp_path):
  command = (
    "import sys; from specsample import entry; entry.answer_interrupts_while_starting(); "
    "print('ready', flush=True); sys.exit(entry.main())"
  )
  process = subprocess.Popen(
    [sys.executable, "-c", command, "translate", "Could not open file %s"], cwd=tmp_path,
    env={**os.environ, "JAX_PLATFORMS": "cpu"}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    text=True,
  )  # fmt: skip
  try:
    assert process.stdout.readline() == "ready\n"
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=60)
  finally:
    process.kill()
  assert process.returncode == 143, (process.returncode, err[-3000:])
  assert err.strip().splitlines() == ["specsample: terminated (SIGTERM)"], err[-3000:]


def test_ctrl_c_while_the_command_is_still_importing_exits_130_with_one_line(tmp_path):
  """The console script's entry point (specsample.entry) answers SIGINT before importing
  JAX and the command line, which takes seconds: no traceback there either."""
  command = (
    "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "from specsample import entry; entry.answer_interrupts_while_starting(); "
    "print('ready', flush=True); sys.exit(entry.main())"
  )
  env = {**os.environ, "JAX_PLATFORMS": "cpu"}
  process = subprocess.Popen(
    [sys.executable, "-c", command, "translate", "Could not open file %s"], cwd=tmp_path,
    env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
  )  # fmt: skip
  try:
    assert process.stdout.readline() == "ready\n"
    process.send_signal(signal.SIGINT)  # the command line's imports have just begun
    out, err = process.communicate(timeout=60)
  finally:
    process.kill()
  assert process.returncode == 130, (process.returncode, err[-3000:])
  assert err.strip().splitlines() == ["specsample: interrupted"], err[-3000:]
  assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("command", [["translate", "Open file"], ["demo"]])
def test_closed_standard_output_is_one_line(command):
  """`specsample ... >&-`: Python starts without sys.stdout; said in one line, status 2,
  before anything loads (not "'NoneType' object has no attribute 'isatty'")."""
  done = subprocess.run(
    [sys.executable, "-m", "specsample.cli", *command], stderr=subprocess.PIPE, text=True,
    preexec_fn=lambda: os.close(1), timeout=300, env={**os.environ, "JAX_PLATFORMS": "cpu"},
  )  # fmt: skip
  assert done.returncode == 2, done.stderr[-2000:]
  assert done.stderr.strip().splitlines() == [
    f"specsample {command[0]}: standard output is closed: there is nowhere to write the results"
  ]


@pytest.mark.parametrize(
  "text, named",
  [
    ("Open \udcff file", "the byte 0xff, which is not UTF-8 at character 6 (after 'Open ')"),
    ("Caf\udcc3", "the byte 0xc3, which is not UTF-8 at character 4 (after 'Caf')"),
    ("x\ud800y", "a lone surrogate U+D800 at character 2 (after 'x')"),
  ],
)
@pytest.mark.parametrize("command", ["translate", "generate"])
def test_text_that_is_not_utf8_is_named_before_loading(command, text, named, capsys, nothing_loads):
  """An argument's bytes that are not UTF-8 arrive as surrogates (and an API caller may
  pass lone surrogates): one line naming the byte and where it is, nothing loaded."""
  line = refused([command, "fine", text], capsys)
  assert line == f"specsample {command}: input 2 has {named}: give UTF-8 text"


def test_an_input_file_that_is_not_utf8_names_the_line(tmp_path, capsys, nothing_loads):
  inputs = tmp_path / "inputs.txt"
  inputs.write_bytes(b"Open the file\nCaf\xe9 au lait\n")
  line = refused(["generate", "--input-file", str(inputs)], capsys)
  assert f"--input-file {inputs} is not UTF-8 text: line 2 has the byte 0xe9" in line


def test_bench_input_files_name_the_bad_line(tmp_path):
  """A JSONL prompt that is not text, a line that is not JSON, an escaped lone surrogate:
  refused naming the file's own line (not the JSON parser's "line 1")."""
  from specsample.cli.bench import bench_inputs

  good = json.dumps({"prompt": "Say hi", "task": "chat"})
  cases = [
    ('{"prompt": 5}', "line 3: every line needs a JSON object with a text 'prompt'"),
    ('{"prompt": "a", oops}', "line 3: every line needs a JSON object with a text 'prompt'"),
    ('{"prompt": "x\\ud800"}', "line 3 has a lone surrogate U+D800 at character 2"),
  ]
  for bad, expected in cases:
    records = tmp_path / "inputs.jsonl"
    records.write_text(f"{good}\n\n{bad}\n{good}\n")
    with pytest.raises(ValueError) as caught:
      bench_inputs(str(records), 8)
    assert f"{records} {expected}" in str(caught.value), str(caught.value)
  assert "line 1: " in _message(bench_inputs, tmp_path, '{"prompt": "a", oops}')
  assert "(column 17: Expecting property name" in _message(
    bench_inputs, tmp_path, '{"prompt": "a", oops}'
  )


def _message(function, tmp_path, line: str) -> str:
  records = tmp_path / "one.jsonl"
  records.write_text(line + "\n")
  with pytest.raises(ValueError) as caught:
    function(str(records), 8)
  return str(caught.value)


def test_generate_drops_the_default_prompt_lookup_when_sampling_only():
  # A lookup proposal is accepted with the target's probability of its one token: when
  # sampling, the bundled draft runs alone unless --prompt-lookup asks for the lookup.
  from specsample.cli.generate import lookup_for_sampling
  from specsample.pairs import PairSpec

  default = PairSpec()  # prompt_lookup None: on for the bundled draft
  assert lookup_for_sampling(default, 0.0) == default
  assert lookup_for_sampling(default, 1.0).prompt_lookup is False
  asked = PairSpec(prompt_lookup=True)
  assert lookup_for_sampling(asked, 0.7) == asked
  assert lookup_for_sampling(PairSpec(prompt_lookup=False), 0.0).prompt_lookup is False


def test_bench_samples_with_the_draft_alone_where_generate_would():
  # bench sweeps every temperature with one pair: at temperature > 0 it takes the draft
  # model behind the default lookup, as generate samples; a lookup asked for stays.
  from toy_pairs import toy_pair

  from specsample.cli.bench import draft_when_sampling
  from specsample.models.lookup_draft import LookupThenModel
  from specsample.models.ngram import NGramDraft
  from specsample.pairs import PairSpec

  target, model = toy_pair()
  behind = LookupThenModel(model, NGramDraft(vocab_size=target.vocab_size, max_ngram=3))
  assert draft_when_sampling(PairSpec(), behind, (0.0, 1.0)) is model
  assert draft_when_sampling(PairSpec(), behind, (0.0,)) is None  # greedy only
  assert draft_when_sampling(PairSpec(prompt_lookup=True), behind, (1.0,)) is None
  assert draft_when_sampling(PairSpec(), model, (1.0,)) is None  # no lookup to drop
