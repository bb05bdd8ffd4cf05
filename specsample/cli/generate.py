"""`specsample generate` (any checkpoint pair, decoder-only or T5) and `specsample
translate` (the bundled English->German T5 pair): the outputs, then alpha, tokens per
target call and the speedup over the target alone, measured in the same run. With one
input and stdout a terminal, the text is printed as the loop accepts it (`StreamedText`)."""

from __future__ import annotations

import dataclasses
import queue
import sys
import threading
from typing import TYPE_CHECKING

from specsample import files
from specsample.cli.compare import Comparison, compare, summary_line
from specsample.cli.limits import check_prompt_lengths, target_context
from specsample.cli.options import UsageError, pair_spec, read_inputs
from specsample.cli.requests import (
  DecodingRequest,
  decoding_request,
  prompt_format,
  tuned_gamma,
)
from specsample.decoding import DynamicTree, SpeculativeSettings

if TYPE_CHECKING:
  from specsample.pairs import PairSpec


class StreamedText:
  """Prints one row's text as its tokens are accepted (a sink for `on_tokens`).

  A call only queues the tokens (the compiled loop waits for it; a slow terminal must not
  hold it up); a thread of its own decodes the row so far and writes what the text
  gained, so a character whose bytes span several tokens appears once it is whole (the
  decoded text is held back while it ends in U+FFFD). `flush` waits until everything
  queued so far is written (compare calls it when the streamed decode returns, so its text
  is out before anything that follows); `finish` stops that thread and writes the rest of
  the final text and the newline: the terminal then holds exactly the text printed
  without streaming.
  """

  def __init__(self, tokenizer, out):
    self.tokenizer, self.out = tokenizer, out
    self.tokens: list[int] = []
    self.printed = ""
    self._queue: queue.SimpleQueue = queue.SimpleQueue()
    self._thread = threading.Thread(target=self._print, name="specsample-print", daemon=True)
    self._thread.start()

  def __call__(self, row: int, tokens: list[int]) -> None:
    self._queue.put(tokens)

  def _print(self) -> None:
    """Takes what is queued (token lists; an Event: set once what came before it is
    written; None: stop), decoding once per batch of what came meanwhile."""
    done = False
    while not done:
      items = [self._queue.get()]
      while not self._queue.empty():  # catch up on what came meanwhile: one decode
        items.append(self._queue.get())
      written: list[threading.Event] = []
      grown = False
      for item in items:
        if item is None:
          done = True
        elif isinstance(item, threading.Event):
          written.append(item)
        else:
          self.tokens += item
          grown = True
      if grown:
        self._write(self.tokenizer.decode(self.tokens).rstrip("\ufffd"))
      for event in written:
        event.set()

  def flush(self) -> None:
    """Returns once every token queued before this call is written to `out`."""
    written = threading.Event()
    self._queue.put(written)
    written.wait()

  def _write(self, text: str) -> None:
    if len(text) > len(self.printed) and text.startswith(self.printed):
      self.out.write(text[len(self.printed) :])
      self.out.flush()
      self.printed = text

  def finish(self, tokens) -> None:
    self._queue.put(None)
    self._thread.join()
    text = self.tokenizer.decode(tokens)
    if not text.startswith(self.printed):  # decoding rewrote printed text: print it anew
      self.out.write("\n")
      self.printed = ""
    self._write(text)
    self.out.write("\n")
    self.out.flush()


def text_stream(texts, tokenizer, stream: bool) -> StreamedText | None:
  """The sink that streams the text: one input, stdout a terminal, `stream` (no --no-stream,
  no --mesh: streaming takes single-device programs)."""
  if not stream or len(texts) != 1:
    return None
  return StreamedText(tokenizer, sys.stdout) if sys.stdout.isatty() else None


class BatchProgress:
  """A progress bar of a batch's decoding on stderr (a sink for `on_tokens`): the tokens
  kept so far of all rows against rows x max_new_tokens (rows that end at EOS end the bar
  early). A call only advances a counter; rich's own thread draws. `flush` (compare calls
  it when the decode returns) removes the bar."""

  def __init__(self, rows: int, max_new_tokens: int, console=None):
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    self._progress = Progress(
      TextColumn(f"decoding {rows} prompts"), BarColumn(), MofNCompleteColumn(),
      TextColumn("tokens"), TimeElapsedColumn(),
      console=console or Console(stderr=True), transient=True,
    )  # fmt: skip
    self._task = self._progress.add_task("decode", total=rows * max_new_tokens)
    self._progress.start()

  def __call__(self, row: int, tokens: list[int]) -> None:
    self._progress.advance(self._task, len(tokens))

  def flush(self) -> None:
    self._progress.stop()


def batch_progress(texts, max_new_tokens: int, stream: bool) -> BatchProgress | None:
  """The progress bar of a batch: several inputs, stderr a terminal, `stream` (no
  --no-stream, no --mesh: its tokens come by the same stream as streamed text)."""
  if not stream or len(texts) < 2:
    return None
  return BatchProgress(len(texts), max_new_tokens) if sys.stderr.isatty() else None


def report(texts, comparison: Comparison, tokenizer, greedy: bool, streamed=None) -> None:
  outputs = comparison.speculative.sequences()[: len(texts)]  # rows padded for a mesh go
  for source, tokens in zip(texts, outputs, strict=True):
    if streamed is not None:
      streamed.finish(tokens)
    else:
      print(tokenizer.decode(tokens))
    if len(texts) > 1:
      print(f"  (from: {source})", file=sys.stderr)
  print(summary_line(comparison), file=sys.stderr)
  if comparison.identical is not None and greedy:
    print(
      f"identical to the target's own greedy output: {'yes' if comparison.identical else 'NO'}",
      file=sys.stderr,
    )


def write_trace(
  target, draft, prompts, settings: SpeculativeSettings, seed: int, tokenizer, path, title
) -> None:
  import dataclasses

  from rich.console import Console

  from specsample.cli.trace import render_html, render_rich, trace_lines
  from specsample.decoding import speculative_decode

  traced = dataclasses.replace(settings, record_trace=True)
  out = speculative_decode(target, draft, prompts[:1], traced, seed=seed)
  lines = trace_lines(out.trace.row(0), tokenizer.token_text, length=int(out.lengths[0]))
  render_rich(lines, Console(stderr=True))  # stdout holds only the outputs
  rule = settings.rule if isinstance(settings.rule, str) else "custom"
  summary = (
    f"gamma {settings.gamma}, {rule} verification, temperature "
    f"{settings.sampling.temperature}; {len(lines)} target calls for {int(out.lengths[0])} "
    f"tokens; alpha {out.stats.alpha:.2f}"
  )
  files.write_text(path, render_html(lines, title=title, summary=summary))  # whole or not at all
  print(f"trace written to {path}", file=sys.stderr)


def run_translate(args) -> int:
  from specsample.pairs import load_pair

  texts = read_inputs(args.text, None)
  request = decoding_request(args)
  context = target_context("bundled:ende", request.max_new_tokens)
  pair = load_pair("bundled:ende")
  target, draft, vocab = pair.target, pair.draft, pair.tokenizer
  prompts = [vocab.encode(pair.prefix + text) for text in texts]
  check_prompt_lengths(prompts, request.max_new_tokens, context)
  gamma = tuned_gamma(target, draft, prompts, request, default=pair.gamma)
  decode(target, draft, prompts, texts, vocab, request, gamma, title=f"translate: {texts[0]}")
  return 0


def decode(
  target, draft, prompts, texts, tokenizer, request: DecodingRequest, gamma: int | None, *,
  title: str, prompt_lengths=None, host_prompts=None, stream: bool = True,
) -> None:  # fmt: skip
  """Decodes the prompts (speculatively at `gamma`, plainly where None) and the target
  alone, prints the outputs and the measures, and writes the trace (--trace; of
  `host_prompts`, the prompts before a mesh placed them, if given)."""
  settings = request.settings(gamma)
  stream = stream and request.stream
  streamed = text_stream(texts, tokenizer, stream)
  comparison = compare(
    target, draft, prompts, settings, speculate=gamma is not None, seed=request.seed,
    repeats=request.repeats, baseline=request.baseline, prompt_lengths=prompt_lengths,
    on_tokens=streamed or batch_progress(texts, request.max_new_tokens, stream),
  )  # fmt: skip
  greedy = request.sampling.temperature == 0
  report(texts, comparison, tokenizer, greedy, streamed)
  if request.trace:
    traced = prompts if host_prompts is None else host_prompts
    write_trace(target, draft, traced, settings, request.seed, tokenizer, request.trace, title)


def lookup_for_sampling(spec: PairSpec, temperature: float) -> PairSpec:
  """The pair without prompt lookup when sampling, unless a flag asked for it. A lookup
  proposal is one token with probability 1, accepted with the target's probability of it:
  at temperature 1 the bundled draft alone earns 1.64 tokens per target call on held-out
  chat prompts, behind lookup 1.54 (docs/training.md). Greedy decoding keeps the default."""
  if spec.prompt_lookup is None and temperature > 0:
    return dataclasses.replace(spec, prompt_lookup=False)
  return spec


def run_generate(args) -> int:
  from specsample.models import DecoderOnly

  texts = read_inputs(args.text, args.input_file)
  request = decoding_request(args)
  context = target_context(args.target, request.max_new_tokens)
  if args.distributed:
    from specsample.scaling.shard import initialize_distributed

    initialize_distributed()
  trees, dynamic = isinstance(request.tree, int), isinstance(request.tree, DynamicTree)
  spec = pair_spec(args, trees=trees, dynamic_tree=dynamic, sharded=bool(args.mesh))
  pair = lookup_for_sampling(spec, request.sampling.temperature).load()
  target, draft = pair.target, pair.draft
  prompts = host_prompts = prompt_format(args).encode(
    texts, pair.tokenizer, decoder_only=isinstance(target, DecoderOnly), prefix=pair.prefix
  )
  check_prompt_lengths(host_prompts, request.max_new_tokens, context)
  for note in pair.notes():
    print(note, file=sys.stderr)
  lengths = None
  if args.mesh:
    import jax

    if request.trace and jax.process_count() > 1:
      raise UsageError("--trace is for single-process runs")
    target, draft, prompts, lengths = shard(pair, prompts, args.mesh, args.shard_draft)
  # On a mesh, c and r are timed on the sharded prompts each time (not kept).
  gamma = tuned_gamma(
    target, draft, prompts, request, default=pair.gamma, prompt_lengths=lengths,
    pair_id=None if args.mesh else pair.id, auto_for_one=not args.mesh,
  )  # fmt: skip
  decode(
    target, draft, prompts, texts, pair.tokenizer, request, gamma,
    title=f"generate: {texts[0]}", prompt_lengths=lengths, host_prompts=host_prompts,
    stream=not args.mesh,
  )  # fmt: skip
  return 0


def shard(pair, prompts, mesh_text: str, shard_draft: bool):
  """Places both models of `pair` and the prompts on the --mesh `mesh_text` (batch padded
  to the data axis; the draft split over the model axis too with `shard_draft`)."""
  import jax

  from specsample.scaling.plan import parse_mesh
  from specsample.scaling.shard import global_prompts, make_mesh, unsplit_parameter_fraction

  mesh_shape = parse_mesh(mesh_text, jax.device_count())
  unsplit = unsplit_parameter_fraction(pair.target, mesh_shape)
  if unsplit > 0:
    print(
      f"warning: model={mesh_shape['model']} does not divide the target's heads / MLP / "
      f"vocabulary dimensions holding {unsplit:.0%} of its parameters; those stay "
      "replicated on every device",
      file=sys.stderr,
    )
  mesh = make_mesh(mesh_shape)
  pair = pair.placed(mesh, shard_draft=shard_draft)
  target, draft = pair.target, pair.draft
  padded, lengths, real = global_prompts(prompts, mesh, pad_id=target.pad_id)
  if real != padded.shape[0]:
    print(f"batch padded from {real} to {padded.shape[0]} rows for the mesh", file=sys.stderr)
  return target, draft, padded, lengths
