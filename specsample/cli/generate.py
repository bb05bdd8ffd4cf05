"""`specsample generate` (any checkpoint pair, decoder-only or T5) and `specsample
translate` (the bundled English->German T5 pair): the outputs, then alpha, tokens per
target call and the speedup over the target alone, measured in the same run."""

from __future__ import annotations

import pathlib
import sys

from specsample.cli.compare import Comparison, compare, summary_line
from specsample.cli.options import (
  UsageError,
  check_new_file,
  read_inputs,
  speculative_settings,
  tuned_gamma,
)
from specsample.decoding import SpeculativeSettings


def report(texts, comparison: Comparison, tokenizer, args) -> None:
  outputs = comparison.speculative.sequences()[: len(texts)]  # rows padded for a mesh go
  for source, tokens in zip(texts, outputs, strict=True):
    print(tokenizer.decode(tokens))
    if len(texts) > 1:
      print(f"  (from: {source})", file=sys.stderr)
  print(summary_line(comparison), file=sys.stderr)
  if comparison.identical is not None and args.temperature == 0:
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
  pathlib.Path(path).write_text(render_html(lines, title=title, summary=summary), encoding="utf-8")
  print(f"trace written to {path}", file=sys.stderr)


def run_translate(args) -> int:
  from specsample.bundled import TASK_PREFIX, load_pair, recommended_gamma

  texts = read_inputs(args.text, None)
  if args.trace:
    check_new_file(args.trace, overwrite=args.overwrite, what="--trace")
  target, draft, vocab = load_pair()
  prompts = [vocab.encode(TASK_PREFIX + text) for text in texts]
  gamma = tuned_gamma(target, draft, prompts, args, default=recommended_gamma())
  settings = speculative_settings(args, gamma)
  comparison = compare(
    target, draft, prompts, settings, speculate=gamma is not None, seed=args.seed,
    repeats=args.repeats,
    baseline=not args.no_baseline,
  )  # fmt: skip
  report(texts, comparison, vocab, args)
  if args.trace:
    title = f"translate: {texts[0]}"
    write_trace(target, draft, prompts, settings, args.seed, vocab, args.trace, title)
  return 0


def encode_prompts(texts, tokenizer, args, *, decoder_only: bool) -> list[list[int]]:
  chat = args.chat
  has_template = getattr(tokenizer, "chat_template", None) is not None
  if chat is None:
    chat = decoder_only and has_template
  if chat and not has_template:
    raise UsageError("--chat: this tokenizer has no chat template")
  if args.system and not chat:
    raise UsageError("--system needs the chat template (--chat)")
  prefix = getattr(args, "prefix", None) or ""
  prompts = []
  for text in texts:
    if chat:
      messages = [{"role": "system", "content": args.system}] if args.system else []
      prompts.append(tokenizer.apply_chat_template([*messages, {"role": "user", "content": text}]))
    else:
      prompts.append(tokenizer.encode(prefix + text))
  return prompts


def run_generate(args) -> int:
  from specsample.models import DecoderOnly
  from specsample.pairs import load_pair

  texts = read_inputs(args.text, args.input_file)
  if args.trace:
    check_new_file(args.trace, overwrite=args.overwrite, what="--trace")
  if args.distributed:
    from specsample.scaling.shard import initialize_distributed

    initialize_distributed()
  pair = load_pair(
    args.target,
    args.draft,
    tokenizer=args.tokenizer,
    dtype=args.dtype,
    weights=args.weights,
    activations=args.activations,
    prompt_lookup=args.prompt_lookup,
    trees=args.tree is not None,
    sharded=bool(args.mesh),
  )
  for note in pair.notes():
    print(note, file=sys.stderr)
  target, draft = pair.target, pair.draft
  prompts = host_prompts = encode_prompts(
    texts, pair.tokenizer, args, decoder_only=isinstance(target, DecoderOnly)
  )
  lengths = None
  if args.mesh:
    target, draft, prompts, lengths = shard(target, draft, prompts, args)
  gamma = tuned_gamma(target, draft, prompts, args, default=pair.gamma, prompt_lengths=lengths)
  settings = speculative_settings(args, gamma)
  comparison = compare(
    target, draft, prompts, settings, speculate=gamma is not None, seed=args.seed,
    repeats=args.repeats,
    baseline=not args.no_baseline, prompt_lengths=lengths,
  )  # fmt: skip
  report(texts, comparison, pair.tokenizer, args)
  if args.trace:
    title = f"generate: {texts[0]}"
    write_trace(target, draft, host_prompts, settings, args.seed, pair.tokenizer, args.trace, title)
  return 0


def shard(target, draft, prompts, args):
  """Places both models and the prompts on the --mesh (batch padded to the data axis)."""
  import jax

  from specsample.scaling.plan import parse_mesh
  from specsample.scaling.shard import (
    global_prompts,
    make_mesh,
    shard_model,
    unsplit_parameter_fraction,
  )

  if args.trace and jax.process_count() > 1:
    raise UsageError("--trace is for single-process runs")
  mesh_shape = parse_mesh(args.mesh, jax.device_count())
  unsplit = unsplit_parameter_fraction(target, mesh_shape)
  if unsplit > 0:
    print(
      f"warning: model={mesh_shape['model']} does not divide the target's heads / MLP / "
      f"vocabulary dimensions holding {unsplit:.0%} of its parameters; those stay "
      "replicated on every device",
      file=sys.stderr,
    )
  mesh = make_mesh(mesh_shape)
  target = shard_model(target, mesh)
  from specsample.models.lookup_draft import LookupThenModel

  if isinstance(draft, LookupThenModel):  # place the draft model behind the lookup
    model = shard_model(draft.model, mesh, model_parallel=args.shard_draft)
    draft = draft.replace(model=model)
  elif hasattr(draft, "params"):  # an n-gram draft has no parameters to place
    draft = shard_model(draft, mesh, model_parallel=args.shard_draft)
  padded, lengths, real = global_prompts(prompts, mesh, pad_id=target.pad_id)
  if real != padded.shape[0]:
    print(f"batch padded from {real} to {padded.shape[0]} rows for the mesh", file=sys.stderr)
  return target, draft, padded, lengths
