"""Compile the paper-scale speculative programs from shapes alone and report what XLA says.

T5-XXL (t5-11b, the paper's target) with each T5 draft at the paper's gamma (Table 2,
WMT EnDe at temperature 1: small 7, base 5, large 3), 512-token inputs, and a Llama 3 8B
target with a Llama 3.2 1B draft (gamma 4, 512-token prompts); batch 1 and 8, bfloat16.
No parameter is allocated (`specsample.scaling.abstract`): each row is a lowering and a
compilation for this machine's backend, with XLA's memory analysis next to
`specsample plan`'s estimate.

  python scripts/check/compile_paper_programs.py --out docs/bench/paper_programs.json
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

from specsample.eval.paper import TABLE2
from specsample.scaling.abstract import compile_from_shapes
from specsample.scaling.plan import DecodeShape, format_bytes, resolve_config


def rows(batches, max_new_tokens: int):
  for draft in ("t5-small", "t5-base", "t5-large"):
    gamma = TABLE2[f"ende/{draft}/t1"].gamma
    for batch in batches:
      yield "t5-11b", draft, DecodeShape(batch, 512, max_new_tokens, gamma, "bfloat16")
  for batch in batches:
    yield "llama3-8b", "llama3-1b", DecodeShape(batch, 512, max_new_tokens, 4, "bfloat16")


def parse_args_with_out(parser: argparse.ArgumentParser, argv) -> argparse.Namespace:
  """`parser`'s arguments and --out, the JSON file the records go to (also when the run is
  interrupted); an --out that exists is refused. measure_greedy_exactness.py reads its
  flags with it too."""
  parser.add_argument("--out", type=pathlib.Path)
  args = parser.parse_args(argv)
  if args.out is not None and args.out.exists():
    parser.error(f"{args.out} exists; remove it first")
  return args


def write_out(path: pathlib.Path | None, value) -> None:
  """`value` as JSON into --out `path` (its directory made), said on stderr; None: nowhere."""
  if path is not None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=2) + "\n")
    print(f"written: {path}", file=sys.stderr)


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--batches", type=int, nargs="+", default=[1, 8])
  parser.add_argument("--max-new-tokens", type=int, default=128)
  args = parse_args_with_out(parser, argv)
  records = []
  header = (
    f"{'target':<10} {'draft':<10} {'batch':>5} {'gamma':>5} {'lower s':>8} {'compile s':>9} "
    f"{'arguments':>11} {'temp':>11} {'XLA total':>11} {'plan':>11}"
  )
  print(header)
  try:
    for target, draft, shape in rows(args.batches, args.max_new_tokens):
      result = compile_from_shapes(resolve_config(target), resolve_config(draft), shape)
      records.append({"target": target, "draft": draft, **result.as_dict()})
      print(
        f"{target:<10} {draft:<10} {shape.batch:>5} {shape.gamma:>5} "
        f"{result.lower_seconds:>8.1f} {result.compile_seconds:>9.1f} "
        f"{format_bytes(result.argument_bytes):>11} {format_bytes(result.temp_bytes):>11} "
        f"{format_bytes(result.xla_bytes):>11} {format_bytes(result.plan_bytes):>11}",
        flush=True,
      )
  except KeyboardInterrupt:
    print("interrupted", file=sys.stderr)
    return 130
  finally:
    if records:
      write_out(args.out, records)
  return 0


if __name__ == "__main__":
  sys.exit(main())
