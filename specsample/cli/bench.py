"""`specsample bench` (measure a pair: alpha, c, r, predicted and measured speedups, gamma
sweep, batch scaling, plots) and `specsample plan` (memory per device, nothing loaded)."""

from __future__ import annotations

import pathlib
import sys

from specsample.cli.options import UsageError, check_output_directory

REPORT_FILES = (
  "report.json", "report.md", "speedup_vs_gamma.png", "acceptance_histogram.png",
  "batch_scaling.png",
)  # fmt: skip


def bench_inputs(input_file: str, num_prompts: int, tasks: list[str] | None = None) -> list[str]:
  """The first `num_prompts` inputs: lines of a text/TSV file (first column), or the
  prompts of a JSONL file, of the lines whose task is in `tasks` if given. A JSONL line is
  {"prompt", "task"} (specsample/bundled/smollm2/prompts.jsonl) or Spec-Bench's
  {"question_id", "category", "turns"} (data/spec_bench/question.jsonl of
  hemingkx/Spec-Bench: its first turn is the prompt, its category the task)."""
  import json

  path = pathlib.Path(input_file)
  if path.is_dir() or not path.exists():
    raise UsageError(f"--input-file {input_file}: not a file")
  lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
  if path.suffix == ".jsonl":
    try:
      records = [_prompt_and_task(json.loads(line)) for line in lines]
      texts = [prompt for prompt, task in records if not tasks or task in tasks]
    except (json.JSONDecodeError, KeyError, TypeError, AttributeError, IndexError) as error:
      message = (
        f"{input_file}: every line needs a JSON object with a 'prompt' (or Spec-Bench's "
        f"'turns') ({error})"
      )
      raise UsageError(message) from None
  elif tasks:
    raise UsageError("--tasks needs a JSONL input file (lines with 'prompt' and 'task')")
  else:
    texts = [line.split("\t")[0] for line in lines]
  if not texts:
    which = f" of the tasks {', '.join(tasks)}" if tasks else ""
    raise UsageError(f"no inputs{which} in {input_file}")
  return texts[:num_prompts]


def _prompt_and_task(record: dict) -> tuple[str, str | None]:
  """(prompt, task) of one JSONL record: ours ("prompt", "task") or Spec-Bench's ("turns":
  the first turn; "category")."""
  if "prompt" in record:
    return str(record["prompt"]), record.get("task")
  turns = record["turns"]
  if not isinstance(turns, list) or not isinstance(turns[0], str):
    raise TypeError(f"'turns' must be a list of strings, got {turns!r}")
  return turns[0], record.get("category")


def run_bench(args) -> int:
  from specsample.bench.pair import BenchSettings
  from specsample.bench.run import run_bench as bench

  if args.target is not None and args.draft is None:
    raise UsageError("give both --target and --draft, or neither (a bundled pair: --pair)")
  pair_name = args.pair
  if pair_name is None:
    pair_name = "smollm2" if args.draft is not None or args.target is not None else "ende"
  if pair_name == "ende" and (args.target or args.draft):
    raise UsageError("--pair ende is the bundled T5 pair: it takes no --target / --draft")
  if pair_name == "ende" and args.prompt_lookup:
    raise UsageError("--prompt-lookup is for decoder-only pairs (--pair smollm2, --target)")
  if args.target is not None and not args.input_file:
    raise UsageError("--input-file is needed with --target/--draft")
  check_output_directory(args.out, REPORT_FILES, overwrite=args.overwrite)
  settings = BenchSettings(
    gammas=args.gammas,
    rules=tuple(args.rules),
    temperatures=tuple(args.temperatures),
    batch_sizes=args.batch_sizes,
    max_new_tokens=args.max_new_tokens,
    repeats=args.repeats,
    seed=args.seed,
    phase_prompts=args.phase_prompts,
  )
  trees = any(rule.startswith("tree") for rule in settings.rules)
  if pair_name == "ende":
    from specsample.bundled import BUNDLE_DIR, TASK_PREFIX, load_pair
    from specsample.pairs import resolve_activations, resolve_weights

    texts = bench_inputs(
      args.input_file or str(BUNDLE_DIR / "test.tsv"), args.num_prompts, args.tasks
    )
    weights = resolve_weights(args.weights, None, dtype=args.dtype, sharded=False)
    resolve_activations(args.activations, weights)
    target, draft, tokenizer = load_pair()
    prefix = TASK_PREFIX if args.prefix is None else args.prefix
    prompts = [tokenizer.encode(prefix + text) for text in texts]
    title = args.title or "bundled EN->DE pair"
  else:
    from specsample.bundled import SMOLLM2_DIR
    from specsample.cli.generate import encode_prompts
    from specsample.models import DecoderOnly
    from specsample.pairs import load_pair

    pair = load_pair(
      args.target,
      args.draft,
      tokenizer=args.tokenizer,
      dtype=args.dtype,
      weights=args.weights,
      activations=args.activations,
      prompt_lookup=args.prompt_lookup,
      trees=trees,
    )
    for note in pair.notes():
      print(note, file=sys.stderr)
    target, draft, tokenizer = pair.target, pair.draft, pair.tokenizer
    default_prompts = str(SMOLLM2_DIR / "prompts.jsonl") if args.target is None else None
    texts = bench_inputs(args.input_file or default_prompts, args.num_prompts, args.tasks)
    prompts = encode_prompts(texts, tokenizer, args, decoder_only=isinstance(target, DecoderOnly))
    title = args.title or pair.title
  if trees:  # before the work: tree rules need tree calls of both models
    from specsample.decoding import SpeculativeSettings

    SpeculativeSettings.of(gamma=1, max_new_tokens=1, tree=2).check_pair(target, draft)
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
