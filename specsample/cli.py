"""The `specsample` command.

specsample translate TEXT...   English -> German with the bundled T5 pair: the
                               translation, alpha, tokens per target call, and the
                               speedup over the same target decoding alone
specsample generate ...        any target/draft checkpoints (T5X or Hugging Face)
specsample bench ...           alpha, c, r, predicted vs measured speedup, gamma sweep and
                               batch scaling of a pair (default: the bundled one)
specsample plan ...            parameter, cache and activation bytes per device on a mesh,
                               and whether they fit an accelerator (nothing is loaded)
specsample demo                the toy Markov pair, checked against exact distributions
"""

from __future__ import annotations

import argparse
import dataclasses
import pathlib
import sys

from specsample.compare import Comparison, DecodeSettings, compare, summary_line
from specsample.core import SamplingConfig


def _add_decoding_options(parser: argparse.ArgumentParser, max_new_tokens: int) -> None:
  group = parser.add_argument_group("decoding")
  group.add_argument(
    "--gamma",
    type=_gamma_value,
    default=None,
    help='draft tokens per iteration, or "auto" (measure alpha, c, r here and pick the best; '
    "default: 4, or for the bundled pair the gamma its evaluation found best)",
  )
  group.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
  group.add_argument("--top-k", type=int, default=0, help="0 = off")
  group.add_argument("--top-p", type=float, default=1.0, help="1 = off")
  group.add_argument("--verification", choices=["token", "block"], default="token")
  group.add_argument("--max-new-tokens", type=int, default=max_new_tokens)
  group.add_argument("--seed", type=int, default=0)
  group.add_argument("--repeats", type=int, default=3, help="timed runs (median)")
  group.add_argument("--no-baseline", action="store_true", help="skip the autoregressive run")
  group.add_argument(
    "--trace",
    nargs="?",
    const="specsample_trace.html",
    metavar="HTML",
    help="draw the acceptance trace in the terminal and write it as HTML "
    "(default file: specsample_trace.html)",
  )


def _gamma_value(text: str) -> int | str:
  if text == "auto":
    return text
  try:
    value = int(text)
  except ValueError:
    raise argparse.ArgumentTypeError(
      f'expected a positive integer or "auto", got {text!r}'
    ) from None
  if value < 1:
    raise argparse.ArgumentTypeError(f"gamma must be >= 1, got {value}")
  return value


def _int_list(text: str) -> tuple[int, ...]:
  """ "1-10" or "2,4,8" -> a tuple of ints."""
  values: list[int] = []
  try:
    for part in text.split(","):
      if "-" in part:
        low, high = (int(x) for x in part.split("-"))
        values += range(low, high + 1)
      else:
        values.append(int(part))
  except ValueError:
    raise argparse.ArgumentTypeError(f'expected e.g. "1-10" or "2,4,8", got {text!r}') from None
  if not values or min(values) < 1:
    raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
  return tuple(values)


def _resolve_gamma(target, draft, prompts, args, prompt_lengths=None) -> None:
  """Replaces --gamma auto by the tuned gamma (measured once, before the timed runs)."""
  if args.gamma != "auto":
    return
  from specsample.bench.tuning import tune_gamma

  sampling = SamplingConfig(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p)
  choice = tune_gamma(
    target,
    draft,
    prompts,
    sampling=sampling,
    verification=args.verification,
    seed=args.seed,
    prompt_lengths=prompt_lengths,
  )
  predicted = ", ".join(f"{g}: {s:.2f}x" for g, s in choice.predicted_speedup.items())
  print(
    f"gamma auto -> {choice.gamma} (alpha {choice.alpha:.2f}, c {choice.c:.3f}, "
    f"r({choice.gamma + 1}) {choice.r[choice.gamma]:.2f}; predicted speedup by gamma {predicted})",
    file=sys.stderr,
  )
  args.gamma = choice.gamma


def _decode_settings(args) -> DecodeSettings:
  sampling = SamplingConfig(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p)
  return DecodeSettings(
    gamma=4 if args.gamma is None else args.gamma,
    max_new_tokens=args.max_new_tokens,
    sampling=sampling,
    verification=args.verification,
    seed=args.seed,
  )


def _parser() -> argparse.ArgumentParser:
  parser = argparse.ArgumentParser(prog="specsample", description=__doc__.split("\n\n")[0])
  commands = parser.add_subparsers(dest="command", required=True)

  translate = commands.add_parser("translate", help="English -> German with the bundled pair")
  translate.add_argument("text", nargs="+", help="English sentences (one argument each)")
  _add_decoding_options(translate, max_new_tokens=48)

  generate = commands.add_parser("generate", help="any T5 target/draft pair")
  generate.add_argument("--target", required=True, help="T5X or Hugging Face checkpoint")
  generate.add_argument("--draft", required=True, help="T5X or Hugging Face checkpoint")
  generate.add_argument("--vocab", help="spiece.model (default: the target's directory)")
  generate.add_argument("--input-file", help="one input per line")
  generate.add_argument("--prefix", default="", help='task prefix, e.g. "summarize: "')
  generate.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
  generate.add_argument("text", nargs="*", help="inputs (instead of --input-file)")
  scale = generate.add_argument_group("devices")
  scale.add_argument("--mesh", help='shard over a device mesh, e.g. "data=2,model=4"')
  scale.add_argument(
    "--shard-draft", action="store_true", help="split the draft over the model axis too"
  )
  scale.add_argument(
    "--distributed", action="store_true", help="multi-host: jax.distributed.initialize() first"
  )
  _add_decoding_options(generate, max_new_tokens=64)

  bench = commands.add_parser("bench", help="measure a pair: alpha, c, r, speedups, plots")
  bench.add_argument("--target", help="T5X or Hugging Face checkpoint (default: bundled pair)")
  bench.add_argument("--draft", help="T5X or Hugging Face checkpoint (with --target)")
  bench.add_argument("--vocab", help="spiece.model (default: the target's directory)")
  bench.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
  bench.add_argument("--prefix", default=None, help="task prefix (bundled pair: its own)")
  bench.add_argument(
    "--input-file", help="one input per line (default: the bundled pair's test split)"
  )
  bench.add_argument("--num-prompts", type=int, default=8, help="inputs to use (from the top)")
  bench.add_argument("--gammas", type=_int_list, default="1-10", help='e.g. "1-10" or "2,4,8"')
  bench.add_argument("--rules", nargs="+", choices=["token", "block"], default=["token", "block"])
  bench.add_argument("--temperatures", type=float, nargs="+", default=[0.0, 1.0])
  bench.add_argument("--batch-sizes", type=_int_list, default="1,4,8,16")
  bench.add_argument("--max-new-tokens", type=int, default=48)
  bench.add_argument("--repeats", type=int, default=3, help="timed runs per decode (median)")
  bench.add_argument("--seed", type=int, default=0)
  bench.add_argument("--out", default="bench_out", help="directory for JSON, markdown, plots")
  bench.add_argument("--title", default=None)

  planner = commands.add_parser("plan", help="memory per device on a mesh, before loading")
  planner.add_argument("--target", required=True, help="preset (t5-11b) or HF directory")
  planner.add_argument("--draft", help="preset or HF directory")
  planner.add_argument("--mesh", default=None, help='e.g. "data=2,model=4" (default: data=1)')
  planner.add_argument("--draft-mesh", default=None, help="default: the target's mesh")
  planner.add_argument("--batch", type=int, default=1)
  planner.add_argument("--input-length", type=int, default=512, help="encoder/prompt tokens")
  planner.add_argument("--max-new-tokens", type=int, default=128)
  planner.add_argument("--gamma", type=int, default=4)
  planner.add_argument("--dtype", choices=["bfloat16", "float16", "float32"], default="bfloat16")
  planner.add_argument("--accelerator", nargs="+", help="check only these (default: all known)")

  from specsample.demo import DemoSettings

  demo = commands.add_parser("demo", help="speculative sampling on a toy Markov model pair")
  defaults = DemoSettings()
  demo.add_argument("--vocab-size", type=int, default=defaults.vocab_size)
  demo.add_argument("--gamma", type=int, default=defaults.gamma)
  demo.add_argument("--verification", choices=["token", "block"], default=defaults.verification)
  demo.add_argument("--temperature", type=float, default=defaults.temperature)
  demo.add_argument("--max-new-tokens", type=int, default=defaults.max_new_tokens)
  demo.add_argument("--samples", type=int, default=defaults.samples)
  demo.add_argument("--draft-noise", type=float, default=defaults.draft_noise)
  demo.add_argument("--seed", type=int, default=defaults.seed)
  return parser


def _report(texts, comparison: Comparison, vocab, args) -> None:
  outputs = comparison.speculative.sequences()[: len(texts)]  # rows padded for a mesh go
  for source, tokens in zip(texts, outputs, strict=True):
    print(vocab.decode(tokens))
    if len(texts) > 1:
      print(f"  (from: {source})", file=sys.stderr)
  print(summary_line(comparison), file=sys.stderr)
  if comparison.identical is not None and args.temperature == 0:
    print(
      f"identical to the target's own greedy output: {'yes' if comparison.identical else 'NO'}",
      file=sys.stderr,
    )


def _trace(target, draft, prompts, settings: DecodeSettings, vocab, path: str, title: str) -> None:
  from specsample.decoding import speculative_generate
  from specsample.trace import render_html, render_rich, trace_lines

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
  )
  from rich.console import Console

  lines = trace_lines(out.trace.row(0), vocab.piece_text, length=int(out.lengths[0]))
  render_rich(lines, Console(stderr=True))  # stdout holds only the outputs
  summary = (
    f"gamma {settings.gamma}, {settings.verification} verification, temperature "
    f"{settings.sampling.temperature}; {len(lines)} target calls for {int(out.lengths[0])} "
    f"tokens; alpha {out.stats.alpha:.2f}"
  )
  pathlib.Path(path).write_text(render_html(lines, title=title, summary=summary), encoding="utf-8")
  print(f"trace written to {path}", file=sys.stderr)


def _run_translate(args) -> int:
  from specsample.bundled import TASK_PREFIX, load_pair, recommended_gamma

  if args.gamma is None:
    args.gamma = recommended_gamma()
  target, draft, vocab = load_pair()
  prompts = [vocab.encode(TASK_PREFIX + text) for text in args.text]
  _resolve_gamma(target, draft, prompts, args)
  settings = _decode_settings(args)
  comparison = compare(
    target, draft, prompts, settings, repeats=args.repeats, baseline=not args.no_baseline
  )
  _report(args.text, comparison, vocab, args)
  if args.trace:
    _trace(target, draft, prompts, settings, vocab, args.trace, f"translate: {args.text[0]}")
  return 0


def _run_generate(args) -> int:
  from specsample.checkpoints import Vocabulary, load_t5

  if args.input_file:
    lines = pathlib.Path(args.input_file).read_text(encoding="utf-8").splitlines()
    texts = [line for line in lines if line.strip()]
  else:
    texts = list(args.text)
  if not texts:
    print("specsample generate: give inputs as arguments or with --input-file", file=sys.stderr)
    return 2
  if args.distributed:
    from specsample.scaling.shard import initialize_distributed

    initialize_distributed()
  target = load_t5(args.target, dtype=args.dtype)
  draft = load_t5(args.draft, dtype=args.dtype)
  vocab = Vocabulary(args.vocab or args.target)
  prompts = host_prompts = [vocab.encode(args.prefix + text) for text in texts]
  lengths = None
  if args.mesh:
    target, draft, prompts, lengths = _shard(target, draft, prompts, args)
  _resolve_gamma(target, draft, prompts, args, lengths)
  settings = _decode_settings(args)
  comparison = compare(
    target,
    draft,
    prompts,
    settings,
    repeats=args.repeats,
    baseline=not args.no_baseline,
    prompt_lengths=lengths,
  )
  _report(texts, comparison, vocab, args)
  if args.trace:
    _trace(target, draft, host_prompts, settings, vocab, args.trace, f"generate: {texts[0]}")
  return 0


def _shard(target, draft, prompts, args):
  """Places both models and the prompts on the --mesh (batch padded to the data axis)."""
  import jax

  from specsample.scaling.plan import parse_mesh
  from specsample.scaling.shard import global_prompts, make_mesh, shard_model

  mesh = make_mesh(parse_mesh(args.mesh, jax.device_count()))
  target = shard_model(target, mesh)
  draft = shard_model(draft, mesh, model_parallel=args.shard_draft)
  padded, lengths, real = global_prompts(prompts, mesh, pad_id=target.pad_id)
  if real != padded.shape[0]:
    print(f"batch padded from {real} to {padded.shape[0]} rows for the mesh", file=sys.stderr)
  if args.trace and jax.process_count() > 1:
    raise ValueError("--trace is for single-process runs")
  return target, draft, padded, lengths


def _run_bench(args) -> int:
  from specsample.bench.pair import BenchSettings
  from specsample.bench.run import run_bench

  if (args.target is None) != (args.draft is None):
    raise ValueError("give both --target and --draft, or neither (the bundled pair)")
  if args.target is None:
    from specsample.bundled import BUNDLE_DIR, TASK_PREFIX, load_pair

    target, draft, vocab = load_pair()
    prefix = TASK_PREFIX if args.prefix is None else args.prefix
    input_file = args.input_file or str(BUNDLE_DIR / "test.tsv")
    title = args.title or "bundled EN->DE pair"
  else:
    from specsample.checkpoints import Vocabulary, load_t5

    target = load_t5(args.target, dtype=args.dtype)
    draft = load_t5(args.draft, dtype=args.dtype)
    vocab = Vocabulary(args.vocab or args.target)
    prefix = args.prefix or ""
    if not args.input_file:
      raise ValueError("--input-file is needed with --target/--draft")
    input_file = args.input_file
    title = args.title or f"{args.target} + {args.draft}"
  lines = pathlib.Path(input_file).read_text(encoding="utf-8").splitlines()
  texts = [line.split("\t")[0] for line in lines if line.strip()][: args.num_prompts]
  if not texts:
    raise ValueError(f"no inputs in {input_file}")
  settings = BenchSettings(
    gammas=args.gammas,
    rules=tuple(args.rules),
    temperatures=tuple(args.temperatures),
    batch_sizes=args.batch_sizes,
    max_new_tokens=args.max_new_tokens,
    repeats=args.repeats,
    seed=args.seed,
  )
  prompts = [vocab.encode(prefix + text) for text in texts]
  report, files = run_bench(target, draft, prompts, settings, args.out, title=title)
  print(pathlib.Path(files["markdown"]).read_text())
  print("written: " + ", ".join(files.values()), file=sys.stderr)
  return 0


def _run_plan(args) -> int:
  from specsample.scaling.plan import DecodeShape, parse_mesh, plan, plan_table, resolve_config

  shape = DecodeShape(
    batch=args.batch,
    input_length=args.input_length,
    max_new_tokens=args.max_new_tokens,
    gamma=args.gamma,
    dtype=args.dtype,
  )
  memory = plan(
    resolve_config(args.target),
    resolve_config(args.draft) if args.draft else None,
    parse_mesh(args.mesh),
    shape,
    draft_mesh=parse_mesh(args.draft_mesh) if args.draft_mesh else None,
  )
  print(plan_table(memory, args.accelerator))
  return 0


def _run_demo(args) -> int:
  from specsample.demo import DemoSettings, run_demo

  fields = {f.name for f in dataclasses.fields(DemoSettings)}
  settings = DemoSettings(**{k: v for k, v in vars(args).items() if k in fields})
  if settings.temperature <= 0:
    print("specsample demo: --temperature must be > 0 for the sampling part", file=sys.stderr)
    return 2
  run_demo(settings)
  return 0


def main(argv: list[str] | None = None) -> int:
  args = _parser().parse_args(argv)
  runners = {
    "translate": _run_translate,
    "generate": _run_generate,
    "bench": _run_bench,
    "plan": _run_plan,
    "demo": _run_demo,
  }
  try:
    return runners[args.command](args)
  except (ValueError, TypeError, FileNotFoundError) as error:
    print(f"specsample {args.command}: {error}", file=sys.stderr)
    return 2


if __name__ == "__main__":
  sys.exit(main())
