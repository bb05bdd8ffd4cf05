"""The `specsample` command.

specsample generate [TEXT...]   speculative decoding with any target/draft pair (GGUF,
                                Hugging Face directories or hub ids, T5X); default:
                                SmolLM2-135M-Instruct and its bundled draft, chat template
specsample translate TEXT...    English -> German with the bundled T5 pair
specsample bench ...            alpha, c, r, predicted vs measured speedup, gamma sweep and
                                batch scaling of a pair (default: the bundled T5 pair)
specsample plan ...             parameter, cache and activation bytes per device on a mesh,
                                and whether they fit an accelerator (nothing is loaded)
specsample demo                 the toy Markov pair, checked against exact distributions

Bad arguments, unreadable checkpoints and bad model outputs end with one line on stderr
and exit code 2, arguments and output paths checked before anything loads; Ctrl-C with
one line and exit code 130. Output files and directories are made before the work and
removed again when it fails.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

from specsample.cli.interrupt import INTERRUPTED_EXIT, exit_on_interrupt
from specsample.cli.options import (
  UsageError,
  add_decoding_options,
  add_special_option,
  check_weights_option,
  draft_shape_name,
  gamma_list,
  int_list,
  positive_int,
  seed_value,
  temperature_value,
)
from specsample.cli.outputs import Outputs
from specsample.decoding.shapes import SHAPE_HELP


def _add_model_options(parser: argparse.ArgumentParser, *, required: bool) -> None:
  help_default = "" if required else " (default: SmolLM2-135M-Instruct and its bundled draft)"
  parser.add_argument(
    "--target", help="GGUF file, Hugging Face directory or hub id, or T5X checkpoint" + help_default
  )
  parser.add_argument(
    "--draft",
    help="a checkpoint with the target's vocabulary (a feature draft's directory too), "
    '"bundled:feature" / "bundled:token" / "bundled:feature-v1" (SmolLM2\'s bundled drafts; '
    'default: the feature draft; feature-v1: the previous one), or "ngram" / "ngram:N" '
    "(prompt lookup)",
  )
  parser.add_argument(
    "--tokenizer",
    "--vocab",
    dest="tokenizer",
    help="tokenizer (GGUF, tokenizer.json directory, spiece.model; default: the target's)",
  )
  lookup = parser.add_mutually_exclusive_group()
  lookup.add_argument(
    "--prompt-lookup", dest="prompt_lookup", action="store_true", default=None,
    help="put prompt lookup in front of the draft model: where the last 2-3 tokens occurred "
    "earlier, propose what followed them (default: on for the bundled SmolLM2 draft; in "
    "`generate`, only when decoding greedily)",
  )  # fmt: skip
  lookup.add_argument(
    "--no-prompt-lookup", dest="prompt_lookup", action="store_false",
    help="the draft model alone",
  )  # fmt: skip
  parser.add_argument(
    "--dtype", choices=["float32", "bfloat16"], default="float32",
    help="the models' arithmetic and weights (bfloat16: for accelerators; on CPUs its "
    "rounding changes greedy output)",
  )  # fmt: skip
  parser.add_argument(
    "--weights", choices=["auto", "float32", "bfloat16", "gguf"], default="auto",
    help="auto (default): as the target checkpoint stores them (a GGUF's blocks, bfloat16 "
    "matrices, else float32; float32 with --dtype bfloat16 or --mesh). float32: every "
    "matrix widened to float32 at load. "
    "bfloat16: weight matrices stored in bfloat16 (half the memory and the bytes read "
    "per token), arithmetic in float32 (with --dtype float32); logits equal those of the "
    "float32 model with the rounded weights. gguf: a GGUF checkpoint's "
    "Q8_0/Q4_0/Q4_1/Q5_0/Q4_K/Q6_K matrices stay in their blocks (a fifth of float32's "
    "memory), dequantized in registers",
  )  # fmt: skip
  parser.add_argument(
    "--activations", choices=["auto", "int8", "int8x2", "float32"], default="auto",
    help="how GGUF blocks are multiplied (--weights gguf). auto (default): int8 where the "
    "CPU kernel runs, else float32. int8: each activation row quantized to 8 bits in blocks "
    "of 32, integer dot products (as llama.cpp computes; the fastest). int8x2: the same with "
    "each block's rounding error quantized in a second 8-bit pass (about 15 bits per "
    "activation: near float32's numbers at twice the rows of integer products). float32: "
    "the float32 product of the dequantized weights (the float32 model's numbers, for parity with "
    "transformers)",
  )  # fmt: skip


class _Parser(argparse.ArgumentParser):
  """argparse with one-line errors (exit code 2), like every other error of the command."""

  def error(self, message: str):
    self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
  parser = _Parser(prog="specsample", description=__doc__.split("\n\n")[0])
  commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

  generate = commands.add_parser("generate", help="speculative decoding with any pair")
  generate.add_argument("text", nargs="*", help="inputs, one argument each (or --input-file)")
  generate.add_argument("--input-file", help="one input per line")
  _add_model_options(generate, required=False)
  chat = generate.add_mutually_exclusive_group()
  chat.add_argument(
    "--chat", dest="chat", action="store_true", default=None,
    help="wrap each input as a user message in the chat template (default: when the "
    "tokenizer has one and the target is decoder-only)",
  )  # fmt: skip
  chat.add_argument(
    "--no-chat", dest="chat", action="store_false", help="encode inputs as they are"
  )
  generate.add_argument("--system", help="a system message for the chat template")
  generate.add_argument("--prefix", default="", help='task prefix, e.g. "summarize: " (T5)')
  add_special_option(generate)
  scale = generate.add_argument_group("devices")
  scale.add_argument("--mesh", help='shard over a device mesh, e.g. "data=2,model=4"')
  scale.add_argument(
    "--shard-draft", action="store_true", help="split the draft over the model axis too"
  )
  scale.add_argument(
    "--distributed", action="store_true", help="multi-host: jax.distributed.initialize() first"
  )
  add_decoding_options(generate, max_new_tokens=64)

  translate = commands.add_parser("translate", help="English -> German with the bundled pair")
  translate.add_argument("text", nargs="+", help="English sentences (one argument each)")
  add_decoding_options(translate, max_new_tokens=48)

  bench = commands.add_parser("bench", help="measure a pair: alpha, c, r, speedups, plots")
  _add_model_options(bench, required=False)
  bench.add_argument(
    "--pair", choices=["ende", "smollm2"], default=None,
    help="a bundled pair: the EN->DE T5 pair on its test split (default), or SmolLM2-135M-"
    "Instruct with its draft (or --draft ngram) on the bundled mixed prompts",
  )  # fmt: skip
  chat = bench.add_mutually_exclusive_group()
  chat.add_argument("--chat", dest="chat", action="store_true", default=None)
  chat.add_argument("--no-chat", dest="chat", action="store_false")
  bench.set_defaults(system=None)
  bench.add_argument("--prefix", default=None, help="task prefix (bundled pair: its own)")
  add_special_option(bench)
  bench.add_argument(
    "--input-file", help="one input per line, or JSONL with 'prompt' (default: the pair's own)"
  )
  bench.add_argument("--num-prompts", type=positive_int, default=8, help="inputs to use")
  bench.add_argument(
    "--tasks", type=lambda text: text.split(","), default=None,
    help='JSONL inputs: only these tasks (Spec-Bench: categories), e.g. "summarize,rewrite"',
  )  # fmt: skip
  bench.add_argument("--gammas", type=gamma_list, default="1-10", help='e.g. "1-10" or "2,4,8"')
  bench.add_argument(
    "--shapes", "--rules", dest="shapes", nargs="+", type=draft_shape_name,
    default=["token", "block"], metavar="SHAPE",
    help=f"draft shapes to sweep (--rules is the old name): {SHAPE_HELP}",
  )  # fmt: skip
  bench.add_argument("--temperatures", type=temperature_value, nargs="+", default=[0.0, 1.0])
  bench.add_argument("--batch-sizes", type=int_list, default="1,4,8,16")
  bench.add_argument("--max-new-tokens", type=positive_int, default=48)
  bench.add_argument("--repeats", type=positive_int, default=3, help="timed runs per decode")
  bench.add_argument("--seed", type=seed_value, default=0)
  bench.add_argument(
    "--phase-prompts", type=positive_int, default=8,
    help="prompts the phase breakdown (where an iteration's time goes) is timed on",
  )  # fmt: skip
  bench.add_argument("--out", default="bench_out", help="directory for JSON, markdown, plots")
  bench.add_argument("--overwrite", action="store_true", help="replace an existing report")
  bench.add_argument("--title", default=None)

  planner = commands.add_parser("plan", help="memory per device on a mesh, before loading")
  planner.add_argument("--target", required=True, help="preset (t5-11b) or HF directory")
  planner.add_argument("--draft", help="preset or HF directory")
  planner.add_argument("--mesh", default=None, help='e.g. "data=2,model=4" (default: data=1)')
  planner.add_argument("--draft-mesh", default=None, help="default: the target's mesh")
  planner.add_argument("--batch", type=positive_int, default=1)
  planner.add_argument("--input-length", type=positive_int, default=512, help="prompt tokens")
  planner.add_argument("--max-new-tokens", type=positive_int, default=128)
  planner.add_argument("--gamma", type=positive_int, default=4)
  planner.add_argument("--dtype", choices=["bfloat16", "float16", "float32"], default="bfloat16")
  planner.add_argument("--accelerator", nargs="+", help="check only these (default: all known)")

  from specsample.cli.demo import DemoSettings

  demo = commands.add_parser("demo", help="speculative sampling on a toy Markov model pair")
  defaults = DemoSettings()
  demo.add_argument("--vocab-size", type=positive_int, default=defaults.vocab_size)
  demo.add_argument("--gamma", type=int, default=defaults.gamma)
  demo.add_argument("--verification", choices=["token", "block"], default=defaults.verification)
  demo.add_argument("--temperature", type=temperature_value, default=defaults.temperature)
  demo.add_argument("--max-new-tokens", type=positive_int, default=defaults.max_new_tokens)
  demo.add_argument("--samples", type=positive_int, default=defaults.samples)
  demo.add_argument("--draft-noise", type=float, default=defaults.draft_noise)
  demo.add_argument("--seed", type=seed_value, default=defaults.seed)
  return parser


def _demo_settings(args):
  from specsample.cli.demo import DemoSettings

  fields = {f.name for f in dataclasses.fields(DemoSettings)}
  return DemoSettings(**{k: v for k, v in vars(args).items() if k in fields})  # checks itself


def _run_demo(args) -> int:
  from specsample.cli.demo import run_demo

  run_demo(_demo_settings(args))
  return 0


def _runner(command: str):
  from specsample.cli import bench, generate

  return {
    "generate": generate.run_generate,
    "translate": generate.run_translate,
    "bench": bench.run_bench,
    "plan": bench.run_plan,
    "demo": _run_demo,
  }[command]


def check_arguments(args) -> None:
  """Everything the arguments alone decide, before any output is made or model loaded."""
  if sys.stdout is None:  # `command >&-`: Python starts with no sys.stdout
    raise UsageError("standard output is closed: there is nowhere to write the results")
  if args.command in ("generate", "bench"):
    check_weights_option(args.weights, args.dtype)
  if args.command in ("generate", "translate"):
    from specsample.cli.requests import decoding_request

    decoding_request(args).check()
  elif args.command == "bench":
    from specsample.cli.bench import check_bench_options

    check_bench_options(args)
  elif args.command == "demo":
    _demo_settings(args)


def make_outputs(args, outputs: Outputs) -> None:
  """The run's output paths, made now (proving they can be written): --trace's file, or
  bench's --out directory."""
  if args.command in ("generate", "translate") and args.trace:
    outputs.new_file(args.trace, overwrite=args.overwrite, what="--trace")
  if args.command == "bench":
    from specsample.cli.bench import REPORT_FILES

    outputs.new_directory(args.out, REPORT_FILES, overwrite=args.overwrite)


COMMANDS = ("generate", "translate", "bench", "plan", "demo")


def main(argv: list[str] | None = None) -> int:
  """Runs the command of `argv` and returns its exit code. As the `specsample` command
  (argv None: sys.argv), Ctrl-C from here on ends the process at once with one line and
  status 130 (`cli.interrupt`); called with an argv, a KeyboardInterrupt returns 130
  after the same line."""
  outputs = Outputs()
  if argv is not None:
    return _main(argv, outputs)
  words = sys.argv[1:]
  prog = f"specsample {words[0]}" if words and words[0] in COMMANDS else "specsample"
  with exit_on_interrupt(prog, outputs.remove_created):
    return _main(words, outputs)


def _main(argv: list[str], outputs: Outputs) -> int:
  from specsample.decoding import NonFiniteLogitsError

  args = build_parser().parse_args(argv)
  prog = f"specsample {args.command}"
  try:
    check_arguments(args)
    make_outputs(args, outputs)
    code = _runner(args.command)(args)
  except KeyboardInterrupt:
    outputs.remove_created()
    print(f"{prog}: interrupted", file=sys.stderr)
    return INTERRUPTED_EXIT
  except (ValueError, TypeError, OSError, NonFiniteLogitsError) as error:
    # ValueError includes CheckpointError and the CLI's UsageError.
    outputs.remove_created()
    message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    print(f"{prog}: {message}", file=sys.stderr)
    return 2
  except BaseException:
    outputs.remove_created()
    raise
  if code != 0:
    outputs.remove_created()
  return code


if __name__ == "__main__":
  sys.exit(main())
