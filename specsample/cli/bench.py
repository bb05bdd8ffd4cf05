"""`specsample bench` (measure a pair: alpha, c, r, predicted and measured speedups, gamma
sweep, batch scaling, plots) and `specsample plan` (memory per device, nothing loaded)."""

from __future__ import annotations

import pathlib
import sys

from specsample.cli.limits import check_prompt_lengths, target_context
from specsample.cli.options import UsageError, check_text

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
  try:
    text = path.read_text(encoding="utf-8-sig")  # a byte-order mark is no part of the input
  except UnicodeDecodeError as error:
    line = error.object[: error.start].count(b"\n") + 1
    raise UsageError(f"{input_file} is not UTF-8 text: line {line} ({error.reason})") from None
  numbered = [(n, line) for n, line in enumerate(text.splitlines(), start=1) if line.strip()]
  lines = [line for _, line in numbered]
  if path.suffix == ".jsonl":
    records = []
    for number, line in numbered:
      try:
        records.append(_prompt_and_task(json.loads(line)))
      except (json.JSONDecodeError, KeyError, TypeError, AttributeError, IndexError) as error:
        if isinstance(error, json.JSONDecodeError):
          error = f"column {error.colno}: {error.msg}"
        raise UsageError(
          f"{input_file} line {number}: every line needs a JSON object with a text 'prompt' "
          f"(or Spec-Bench's 'turns') ({error})"
        ) from None
      check_text(records[-1][0], f"{input_file} line {number}")  # "\ud800" escapes
    texts = [prompt for prompt, task in records if not tasks or task in tasks]
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
    if not isinstance(record["prompt"], str):
      raise TypeError(f"'prompt' must be text, got {record['prompt']!r}")
    return record["prompt"], record.get("task")
  turns = record["turns"]
  if not isinstance(turns, list) or not isinstance(turns[0], str):
    raise TypeError(f"'turns' must be a list of strings, got {turns!r}")
  return turns[0], record.get("category")


def pair_name(args) -> str:
  """The pair `bench` measures ("ende" or "smollm2"), its model options checked."""
  if args.target is not None and args.draft is None:
    raise UsageError("give both --target and --draft, or neither (a bundled pair: --pair)")
  name = args.pair
  if name is None:
    name = "smollm2" if args.draft is not None or args.target is not None else "ende"
  if name == "ende" and (args.target or args.draft):
    raise UsageError("--pair ende is the bundled T5 pair: it takes no --target / --draft")
  if name == "ende" and args.prompt_lookup:
    raise UsageError("--prompt-lookup is for decoder-only pairs (--pair smollm2, --target)")
  if args.target is not None and not args.input_file:
    raise UsageError("--input-file is needed with --target/--draft")
  return name


def bench_settings(args):
  """The sweep's settings, each (gamma, draft shape, temperature) checked as the decoder
  will take it: every bad value is refused before anything loads."""
  from specsample.bench.pair_report import BenchSettings
  from specsample.core import SamplingConfig
  from specsample.decoding import SpeculativeSettings
  from specsample.decoding.shapes import DraftShape

  settings = BenchSettings(
    gammas=args.gammas,
    shapes=tuple(args.shapes),
    temperatures=tuple(args.temperatures),
    batch_sizes=args.batch_sizes,
    max_new_tokens=args.max_new_tokens,
    repeats=args.repeats,
    seed=args.seed,
    phase_prompts=args.phase_prompts,
  )
  for temperature in settings.temperatures:
    sampling = SamplingConfig(temperature=temperature)
    for shape in map(DraftShape.parse, settings.shapes):
      for gamma in settings.gammas:
        SpeculativeSettings.of(
          gamma=gamma, max_new_tokens=settings.max_new_tokens, sampling=sampling,
          **shape.options(gamma),
        )  # fmt: skip
  return settings


def check_bench_options(args) -> None:
  """What the arguments alone decide, before the output directory is made."""
  pair_name(args)
  bench_settings(args)


def draft_when_sampling(spec, draft, temperatures):
  """The draft `bench` samples with where `specsample generate` would drop the prompt
  lookup (`cli.generate.lookup_for_sampling`): the draft model behind it; None where the
  draft is the same at every temperature."""
  from specsample.cli.generate import lookup_for_sampling
  from specsample.models.lookup_draft import LookupThenModel

  sampled = [t for t in temperatures if t > 0]
  if not sampled or lookup_for_sampling(spec, max(sampled)) is spec:
    return None
  return draft.model if isinstance(draft, LookupThenModel) else None


def run_bench(args) -> int:
  from specsample.bench.run import run_bench as bench
  from specsample.cli.requests import prompt_format

  name = pair_name(args)
  settings = bench_settings(args)
  form = prompt_format(args)
  from specsample.decoding.shapes import DraftShape

  shapes = [DraftShape.parse(shape) for shape in settings.shapes]
  chains = any(shape.chains for shape in shapes)  # no lookup in front
  dynamic = any(shape.dynamic for shape in shapes)  # lookup, if any, joins the tree as a branch
  trees = chains or dynamic
  if name == "ende":
    from specsample.bundled import pair_dir
    from specsample.pairs import load_pair

    texts = bench_inputs(
      args.input_file or str(pair_dir("ende") / "test.tsv"), args.num_prompts, args.tasks
    )
    context = target_context("bundled:ende", args.max_new_tokens)
    pair = load_pair(
      "bundled:ende", dtype=args.dtype, weights=args.weights, activations=args.activations
    )
    target, draft, tokenizer = pair.target, pair.draft, pair.tokenizer
    prefix = pair.prefix if form.prefix is None else form.prefix
    prompts = [tokenizer.encode(prefix + text) for text in texts]
    title = args.title or pair.title
    notes, sampling_draft = [], None
  else:
    from specsample.bundled import SMOLLM2_DIR
    from specsample.cli.options import pair_spec
    from specsample.models import DecoderOnly

    default_prompts = str(SMOLLM2_DIR / "prompts.jsonl") if args.target is None else None
    texts = bench_inputs(args.input_file or default_prompts, args.num_prompts, args.tasks)
    context = target_context(args.target, args.max_new_tokens)
    spec = pair_spec(args, trees=chains, dynamic_tree=dynamic)
    pair = spec.load()
    target, draft, tokenizer, notes = pair.target, pair.draft, pair.tokenizer, pair.notes()
    decoder_only = isinstance(target, DecoderOnly)
    prompts = form.encode(texts, tokenizer, decoder_only=decoder_only, prefix=pair.prefix)
    title = args.title or pair.title
    sampling_draft = draft_when_sampling(spec, draft, settings.temperatures)
    if sampling_draft is not None and not args.title:
      title += " (at temperature > 0: the draft alone)"
  check_prompt_lengths(prompts, settings.max_new_tokens, context)
  for note in notes:
    print(note, file=sys.stderr)
  if trees:  # before the work: tree shapes need tree calls of both models
    from specsample.decoding import DynamicTree, SpeculativeSettings

    for tree in [2] * chains + [DynamicTree(nodes=2, branching=2)] * dynamic:
      SpeculativeSettings.of(gamma=2, max_new_tokens=1, tree=tree).check_pair(target, draft)
  report, files = bench(
    target, draft, prompts, settings, args.out, title=title, sampling_draft=sampling_draft
  )
  print(pathlib.Path(files["markdown"]).read_text())
  print("written: " + ", ".join(files.values()), file=sys.stderr)
  return 0


def run_plan(args) -> int:
  from specsample.scaling.plan import (
    DecodeShape,
    parse_mesh,
    plan,
    plan_table,
    plan_warnings,
    resolve_config,
  )

  shape = DecodeShape(
    batch=args.batch,
    input_length=args.input_length,
    max_new_tokens=args.max_new_tokens,
    gamma=args.gamma,
    dtype=args.dtype,
  )
  target = resolve_config(args.target)
  draft = resolve_config(args.draft) if args.draft else None
  mesh = parse_mesh(args.mesh)
  draft_mesh = parse_mesh(args.draft_mesh) if args.draft_mesh else None
  memory = plan(target, draft, mesh, shape, draft_mesh=draft_mesh)
  for warning in plan_warnings(target, draft, mesh, shape, draft_mesh=draft_mesh):
    print(f"warning: {warning}", file=sys.stderr)
  print(plan_table(memory, args.accelerator))
  return 0
