"""Streaming: the tokens each iteration hands the host, the Python API around them, and
`specsample generate` printing text as it is accepted in a real terminal."""

from __future__ import annotations

import dataclasses
import os
import pathlib
import pty
import select
import subprocess
import sys
import threading
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import specsample
from specsample import SamplingConfig, SpeculativeSettings, generate, speculative_generate
from specsample.cli.generate import StreamedText
from specsample.decoding import autoregressive, speculative_decode, speculative_program
from specsample.decoding.programs import clear_compiled_programs
from specsample.kernels import token_queue
from specsample.models import MarkovLM
from specsample.models.toy import MarkovFeatureDraft

GREEDY = SamplingConfig(temperature=0.0)
EOS = 1


class Chunks:
  """A sink recording each call: (row, tokens) in order."""

  def __init__(self):
    self.calls: list[tuple[int, list[int]]] = []

  def __call__(self, row: int, tokens: list[int]) -> None:
    assert isinstance(row, int) and all(isinstance(t, int) for t in tokens) and tokens
    self.calls.append((row, tokens))

  def rows(self, batch: int) -> list[list[int]]:
    joined = [[] for _ in range(batch)]
    for row, tokens in self.calls:
      joined[row] += tokens
    return joined

  def sizes(self, row: int) -> list[int]:
    return [len(tokens) for r, tokens in self.calls if r == row]


def assert_same(a, b):
  for field in ("tokens", "lengths"):
    np.testing.assert_array_equal(np.asarray(getattr(a, field)), np.asarray(getattr(b, field)))
  for field in dataclasses.fields(a.stats):
    left, right = getattr(a.stats, field.name), getattr(b.stats, field.name)
    np.testing.assert_array_equal(np.asarray(left), np.asarray(right), err_msg=field.name)


def chain_model(successor: dict[int, int], vocab: int = 10) -> MarkovLM:
  """A first-order model whose argmax follows `successor`."""
  table = np.array(jax.random.normal(jax.random.key(7), (vocab, vocab)))
  for token, nxt in successor.items():
    table[token, nxt] = 10.0
  return MarkovLM(jnp.asarray(table, jnp.float32), eos_id=EOS, pad_id=0)


# 0 -> 2 -> 3 -> 4 -> 5 -> 6 -> 7 -> EOS; 8 <-> 9 never ends.
CHAIN = {0: 2, 2: 3, 3: 4, 4: 5, 5: 6, 6: 7, 7: EOS, EOS: 2, 8: 9, 9: 8}


def test_chunks_are_the_kept_tokens_of_each_iteration(way_out):
  """A perfect draft commits gamma + 1 = 5 tokens per iteration: EOS inside a block and
  max_new_tokens cutting one leave only the kept tokens in the chunk; finished rows send
  nothing."""
  target = chain_model(CHAIN)
  prompts = [[0], [5], [8], [7]]
  chunks = Chunks()
  out = speculative_generate(
    target, target, prompts, gamma=4, max_new_tokens=7, sampling=GREEDY, on_tokens=chunks
  )
  assert chunks.rows(4) == out.sequences()
  assert out.sequences() == [[2, 3, 4, 5, 6, 7, EOS], [6, 7, EOS], [9, 8] * 3 + [9], [EOS]]
  assert [chunks.sizes(row) for row in range(4)] == [[5, 2], [3], [5, 2], [1]]
  assert [row for row, _ in chunks.calls] == [0, 1, 2, 3, 0, 2]  # per iteration, rows in order


def noisy_copy(target: MarkovLM, seed: int, scale: float = 1.5) -> MarkovLM:
  noise = jax.random.normal(jax.random.key(seed), target.logits_table.shape)
  return dataclasses.replace(target, logits_table=target.logits_table + scale * noise)


SHAPES = {
  "chain": {},
  "adaptive": {"adaptive": True},
  "tree": {"tree": 2},
  "feature": {},
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_streamed_tokens_are_the_output_for_every_draft_shape(shape):
  """Sampled decoding, rows accepting different numbers, EOS and max_new_tokens: the
  chunks of each row concatenate to its output, and the output, statistics included, is
  bit for bit that of the program without streaming."""
  target = MarkovLM.random(3, 7, order=2, scale=2.0, eos_id=EOS)
  draft = noisy_copy(target, 11)
  if shape == "feature":
    draft = MarkovFeatureDraft(draft.logits_table, eos_id=EOS)
  rng = np.random.default_rng(0)
  prompts = [rng.integers(2, 7, size=rng.integers(1, 5)).tolist() for _ in range(8)]
  kwargs = dict(gamma=4, max_new_tokens=13, sampling=SamplingConfig(1.0), seed=5, **SHAPES[shape])
  chunks = Chunks()
  streamed = speculative_generate(target, draft, prompts, on_tokens=chunks, **kwargs)
  plain = speculative_generate(target, draft, prompts, **kwargs)
  assert_same(streamed, plain)
  assert chunks.rows(len(prompts)) == streamed.sequences()
  lengths = np.asarray(streamed.lengths)
  assert (lengths < 13).any() and (lengths == 13).any()  # rows end at EOS and at the cap
  assert len(set(np.asarray(streamed.stats.accepted).tolist())) > 1
  assert max(len(tokens) for _, tokens in chunks.calls) > 1


def test_plain_decoding_streams_one_token_per_step():
  target = MarkovLM.random(2, 7, scale=2.0, eos_id=EOS)
  prompts = [[2, 3], [4], [5, 6, 2]]
  chunks = Chunks()
  streamed = generate(target, prompts, max_new_tokens=9, seed=1, on_tokens=chunks)
  assert_same(streamed, generate(target, prompts, max_new_tokens=9, seed=1))
  assert chunks.rows(3) == streamed.sequences()
  assert {len(tokens) for _, tokens in chunks.calls} == {1}


@pytest.fixture(params=["queue", "callback"])
def way_out(request, monkeypatch):
  """Each way the tokens leave the loop: the native queue (where the kernels are built: CI
  builds them) and the host callback that accelerators and kernel-less installs take."""
  if request.param == "queue":
    assert token_queue.available(), "the native token queue is not built"
    yield token_queue.TARGET
    return
  monkeypatch.setattr(token_queue, "available", lambda: False)
  clear_compiled_programs()  # the programs traced with the queue
  yield "callback"
  clear_compiled_programs()


def test_nothing_is_compiled_in_without_streaming(way_out):
  target = MarkovLM.random(0, 8, eos_id=EOS, max_length=64)
  prompts, lengths, key = jnp.array([[1, 2]]), jnp.array([2]), jax.random.key(0)
  settings = SpeculativeSettings(gamma=3, max_new_tokens=8)
  off = speculative_program.lower(target, target, prompts, lengths, key, settings).as_text()
  on = speculative_program.lower(
    target, target, prompts, lengths, key, dataclasses.replace(settings, stream=True),
    np.int32(1),
  ).as_text()  # fmt: skip
  other = ({"callback", token_queue.TARGET} - {way_out}).pop()
  assert way_out not in off and way_out in on and other not in on
  plain = autoregressive.AutoregressiveSettings(max_new_tokens=8, sampling=SamplingConfig())
  lower = autoregressive.generate_program.lower
  assert way_out not in lower(target, prompts, lengths, key, plain).as_text()
  streaming = dataclasses.replace(plain, stream=True)
  assert way_out in lower(target, prompts, lengths, key, streaming, np.int32(1)).as_text()
  with pytest.raises(ValueError, match="stream_id"):
    speculative_program.lower(
      target, target, prompts, lengths, key, dataclasses.replace(settings, stream=True)
    )


def test_new_sinks_reuse_the_compiled_program(count_compilations):
  target = MarkovLM.random(4, 8, eos_id=EOS, max_length=64)
  kwargs = dict(gamma=3, max_new_tokens=10, seed=0)
  speculative_generate(target, target, [[2, 3]], on_tokens=Chunks(), **kwargs)
  generate(target, [[2, 3]], max_new_tokens=10, on_tokens=Chunks())
  first, second = Chunks(), Chunks()
  with count_compilations() as compiled:
    out = speculative_generate(target, target, [[4, 5]], on_tokens=first, **kwargs)
    speculative_generate(target, target, [[4, 5]], on_tokens=lambda row, ids: None, **kwargs)
    plain = generate(target, [[6, 7]], max_new_tokens=10, on_tokens=second)
    streaming = SpeculativeSettings(gamma=3, max_new_tokens=10, stream=True)  # no sink
    dropped = speculative_decode(target, target, [[4, 5]], streaming, seed=0)
  assert compiled == [], f"{len(compiled)} recompilations"
  assert dropped.sequences() == out.sequences()
  assert first.rows(1) == out.sequences() and second.rows(1) == plain.sequences()


def test_a_sink_error_stops_the_loop_and_is_raised(way_out):
  target = MarkovLM.random(5, 8, max_length=128)  # no EOS: 100 tokens unless stopped
  calls = []

  def sink(row, tokens):
    calls.append(tokens)
    if len(calls) == 2:
      raise KeyError("enough")

  with pytest.raises(KeyError, match="enough"):
    speculative_generate(target, target, [[2]], gamma=2, max_new_tokens=100, on_tokens=sink)
  assert len(calls) == 2  # the loop stopped at the iteration that failed
  chunks = Chunks()  # and the next call streams normally
  out = speculative_generate(target, target, [[2]], gamma=2, max_new_tokens=10, on_tokens=chunks)
  assert chunks.rows(1) == out.sequences()


def test_stream_iterates_the_accepted_tokens(way_out):
  target = MarkovLM.random(6, 7, scale=2.0, eos_id=EOS)
  draft = noisy_copy(target, 3)
  prompts = [[2, 3], [4], [5, 6]]
  tokens = stream_rows(specsample.stream(speculative_generate, target, draft, prompts,
                                         gamma=3, max_new_tokens=12, seed=2), 3)  # fmt: skip
  assert tokens[0] == tokens[1].output.sequences()
  plain = stream_rows(specsample.stream(generate, target, prompts, max_new_tokens=5), 3)
  assert plain[0] == plain[1].output.sequences()
  with pytest.raises(ValueError, match="max_new_tokens"):
    list(specsample.stream(generate, target, prompts, max_new_tokens=0))


def stream_rows(token_stream, batch):
  rows = [[] for _ in range(batch)]
  for row, tokens in token_stream:
    rows[row] += tokens
  return rows, token_stream


def test_leaving_a_stream_early_stops_the_decode(way_out):
  target = MarkovLM.random(5, 8, max_length=600)  # no EOS
  token_stream = specsample.stream(
    speculative_generate, target, target, [[2]], gamma=2, max_new_tokens=500
  )
  for seen, _ in enumerate(token_stream):
    if seen == 2:
      break
  assert token_stream.output is None
  assert not token_stream._thread.is_alive()


def test_concurrent_streams_each_see_their_own_tokens(way_out):
  target = MarkovLM.random(7, 7, scale=2.0, eos_id=EOS)
  prompts = {name: [[2 + i, 3], [4 + i]] for i, name in enumerate("abc")}
  speculative_generate(target, target, prompts["a"], gamma=2, max_new_tokens=20)  # compile
  results = {}

  def decode(name):
    chunks = Chunks()
    out = speculative_generate(
      target, target, prompts[name], gamma=2, max_new_tokens=20, on_tokens=chunks
    )
    results[name] = (chunks.rows(2), out.sequences())

  threads = [threading.Thread(target=decode, args=(name,)) for name in prompts]
  for thread in threads:
    thread.start()
  for thread in threads:
    thread.join()
  assert sorted(results) == ["a", "b", "c"]
  for streamed, output in results.values():
    assert streamed == output


EXIT_WITH_A_LIVE_STREAM = """
import sys
import specsample
from specsample.models import MarkovLM
model = MarkovLM.random(0, 7, scale=0.1)
items = iter(specsample.stream(specsample.generate, model, [[1, 2]], max_new_tokens=500))
print(next(items), flush=True)
sys.exit(0)
"""


def test_exiting_with_a_live_stream_closes_it_first():
  """One item taken, the iterator still referenced, sys.exit(0): the decode still runs in
  its worker when the interpreter exits. The stream is closed first (not an abort in
  XLA's teardown: "terminate called without an active exception", status 134)."""
  for _ in range(2):  # the abort came on most runs, not all
    done = subprocess.run(
      [sys.executable, "-c", EXIT_WITH_A_LIVE_STREAM], capture_output=True, text=True,
      timeout=300, env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("(0, [") and "terminate called" not in done.stderr
    assert "Exception ignored" not in done.stderr, done.stderr[-2000:]


class ByteTokenizer:
  """Token i is byte i (a byte-level tokenizer: characters may span tokens)."""

  def decode(self, ids):
    return bytes(ids).decode("utf-8", errors="replace")


class Recorder:
  def __init__(self):
    self.writes: list[str] = []

  def write(self, text):
    self.writes.append(text)

  def flush(self):
    pass


def test_streamed_text_holds_back_split_characters():
  text = "Grüße, 世界!"
  ids = list(text.encode())
  out = Recorder()
  printer = StreamedText(ByteTokenizer(), out)
  for i in range(0, len(ids), 2):  # 2 bytes per chunk: characters split across chunks
    printer(0, ids[i : i + 2])
    deadline = time.monotonic() + 10
    while len(printer.tokens) < min(i + 2, len(ids)) and time.monotonic() < deadline:
      time.sleep(0.001)  # its printing thread took the chunk
  printer.finish(ids)
  assert "".join(out.writes) == text + "\n"
  assert not any("\ufffd" in write for write in out.writes)
  assert len(out.writes) > 2  # it streamed


class SlowRecorder(Recorder):
  """A terminal that takes 30 ms per write (a loaded machine's)."""

  def write(self, text):
    time.sleep(0.03)
    super().write(text)


def test_streamed_text_is_out_before_the_baseline_starts(monkeypatch):
  """compare flushes the printed decode's stream when that call returns: with a terminal
  slower than the decode, every streamed character is written before the baseline's first
  call, and nothing after it."""
  import specsample.cli.compare as compare_module

  target = chain_model(CHAIN, vocab=10)
  draft = noisy_copy(target, 3, scale=0.5)
  out = SlowRecorder()
  printer = StreamedText(ByteTokenizer(), out)
  at_baseline: list[str] = []
  baseline = compare_module.generate

  def recorded(*args, **kwargs):
    at_baseline.append("".join(out.writes))
    return baseline(*args, **kwargs)

  monkeypatch.setattr(compare_module, "generate", recorded)
  settings = SpeculativeSettings.of(gamma=1, max_new_tokens=24, sampling=GREEDY)
  comparison = compare_module.compare(target, draft, [[8]], settings, repeats=1, on_tokens=printer)
  (tokens,) = comparison.speculative.sequences()
  assert len(tokens) == 24 and at_baseline
  assert at_baseline[0] == ByteTokenizer().decode(tokens)  # all of it, before the baseline
  written = len(out.writes)
  printer.finish(tokens)
  assert out.writes[written:] == ["\n"]


def read_terminal(argv: list[str], timeout: float = 600) -> tuple[int, str]:
  """Runs argv with stdout and stderr on a new pseudo-terminal; returns its exit code and
  everything written to the terminal, in order."""
  controller, terminal = pty.openpty()
  env = {**os.environ, "PYTHONUNBUFFERED": "1"}
  process = subprocess.Popen(argv, stdin=terminal, stdout=terminal, stderr=terminal, env=env)
  os.close(terminal)
  written = bytearray()
  deadline = time.monotonic() + timeout
  try:
    while time.monotonic() < deadline:
      ready, _, _ = select.select([controller], [], [], 1.0)
      if ready:
        try:
          data = os.read(controller, 4096)
        except OSError:  # the terminal closed: the process is gone
          break
        if not data:
          break
        written += data
      elif process.poll() is not None:
        break
  finally:
    process.kill() if process.poll() is None else None
    os.close(controller)
  return process.wait(), written.decode("utf-8", errors="replace").replace("\r\n", "\n")


ENDE = pathlib.Path(specsample.__file__).parent / "bundled" / "ende"
MARKER = "<the baseline decode starts>"
# `specsample generate`, with the baseline's first call saying when it starts.
MARKED_MAIN = f"""
import sys
import specsample.cli.compare as compare
from specsample.cli.main import main
generate = compare.generate
def marked(*args, **kwargs):
  sys.stderr.write({MARKER!r} + "\\n")
  compare.generate = generate
  return generate(*args, **kwargs)
compare.generate = marked
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.skipif(not (ENDE / "target").is_dir(), reason="the bundled EN->DE pair")
def test_generate_streams_to_a_terminal():
  """In a terminal the text is complete before the baseline decode even starts (so it
  came out of the speculative decode), and it equals the --no-stream text."""
  argv = [
    "generate", "--target", str(ENDE / "target"), "--draft", str(ENDE / "draft"),
    "--vocab", str(ENDE / "spiece.model"), "--prefix", "translate English to German: ",
    "--max-new-tokens", "24", "--repeats", "1", "--gamma", "3", "Could not open file %s",
  ]  # fmt: skip
  code, streamed = read_terminal([sys.executable, "-c", MARKED_MAIN, *argv])
  assert code == 0, streamed
  code, printed = read_terminal([sys.executable, "-m", "specsample.cli", *argv, "--no-stream"])
  assert code == 0, printed
  stats = printed.index("alpha ")
  text = printed[:stats].splitlines()[-1]  # the line before the statistics
  assert len(text) > 5 and "Datei" in text
  before, after = streamed.split(MARKER + "\n")
  assert before.endswith(text)  # all of it printed before the baseline started
  assert after.startswith("\nalpha ")  # then only the newline, and the statistics
  assert "identical to the target's own greedy output: yes" in after


def test_a_batch_shows_its_progress_on_a_terminal():
  """Several inputs on a terminal: a bar on stderr counts the tokens every row kept, as
  the compiled loop hands them over; it is gone once the decode returns."""
  import io

  from rich.console import Console

  import specsample.cli.compare as compare_module
  from specsample.cli.generate import BatchProgress

  target = MarkovLM.random(3, 7, order=2, scale=2.0, eos_id=EOS)
  screen = io.StringIO()
  bar = BatchProgress(4, 12, console=Console(file=screen, force_terminal=True, width=100))
  settings = SpeculativeSettings.of(gamma=3, max_new_tokens=12, sampling=SamplingConfig(1.0))
  prompts = [[2, 3], [4], [5, 6, 2], [3]]
  comparison = compare_module.compare(
    target, noisy_copy(target, 5), prompts, settings, repeats=1, on_tokens=bar
  )
  task = bar._progress.tasks[0]
  assert task.completed == sum(map(len, comparison.speculative.sequences())) > 4
  assert task.total == 48 and bar._progress.live.is_started is False  # stopped by compare
  assert "decoding 4 prompts" in screen.getvalue()
