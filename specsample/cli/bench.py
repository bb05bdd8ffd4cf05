"""`specsample bench` (measure a pair: alpha, c, r, predicted and measured speedups, gamma
sweep, batch scaling, plots) and `specsample plan` (memory per device, nothing loaded)."""

from __future__ import annotations

import pathlib
import sys

from specsample.cli.options import UsageError, check_output_directory, check_tokenizer

REPORT_FILES = (
  "report.json", "report.md", "speedup_vs_gamma.png", "acceptance_histogram.png",
  "batch_scaling.png",
)  # fmt: skip


def bench_inputs(input_file: str, num_prompts: int) -> list[str]:
  path = pathlib.Path(input_file)
  if path.is_dir() or not path.exists():
    raise UsageError(f"--input-file {input_file}: not a file")
  lines = path.read_text(encoding="utf-8").splitlines()
  texts = [line.split("\t")[0] for line in lines if line.strip()][:num_prompts]
  if not texts:
    raise UsageError(f"no inputs in {input_file}")
  return texts


def run_bench(args) -> int:
  from specsample.bench.pair import BenchSettings
  from specsample.bench.run import run_bench as bench

  if (args.target is None) != (args.draft is None):
    raise UsageError("give both --target and --draft, or neither (the bundled pair)")
  check_output_directory(args.out, REPORT_FILES, overwrite=args.overwrite)
  settings = BenchSettings(
    gammas=args.gammas,
    rules=tuple(args.rules),
    temperatures=tuple(args.temperatures),
    batch_sizes=args.batch_sizes,
    max_new_tokens=args.max_new_tokens,
    repeats=args.repeats,
    seed=args.seed,
  )
  if args.target is None:
    from specsample.bundled import BUNDLE_DIR, TASK_PREFIX, load_pair

    texts = bench_inputs(args.input_file or str(BUNDLE_DIR / "test.tsv"), args.num_prompts)
    target, draft, tokenizer = load_pair()
    prefix = TASK_PREFIX if args.prefix is None else args.prefix
    prompts = [tokenizer.encode(prefix + text) for text in texts]
    title = args.title or "bundled EN->DE pair"
  else:
    from specsample.checkpoints import load_model, load_tokenizer

    if not args.input_file:
      raise UsageError("--input-file is needed with --target/--draft")
    texts = bench_inputs(args.input_file, args.num_prompts)
    target = load_model(args.target, dtype=args.dtype)
    draft = load_model(args.draft, dtype=args.dtype)
    tokenizer = load_tokenizer(args.tokenizer or args.target)
    check_tokenizer(tokenizer, target)
    prompts = [tokenizer.encode((args.prefix or "") + text) for text in texts]
    title = args.title or f"{args.target} + {args.draft}"
  report, files = bench(target, draft, prompts, settings, args.out, title=title)
  print(pathlib.Path(files["markdown"]).read_text())
  print("written: " + ", ".join(files.values()), file=sys.stderr)
  return 0


def run_plan(args) -> int:
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
