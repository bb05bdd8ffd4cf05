"""The token-level draft's recipe of the training pipeline (specsample.train.pipeline;
DistillSpec): the bundled draft of SmolLM2-135M-Instruct (the default target; `target`
names another GGUF), trained on this machine; its command line is
scripts/train/train_smollm2_draft.py.

Stages (`TokenDraftOptions.stages`; each resumes from what `work` already holds):
  1. prompts   chat prompts from this machine's text (specsample.data.chat_prompts): the
               train split, and the bench set from the held-out sources
               -> work/train_prompts.jsonl, bundle/prompts.jsonl
  2. generate  the target's responses (greedy, and temperature 1 for every 4th prompt) with
               its top-k log-probabilities, appended per batch  -> work/responses.jsonl
  3. vocab     the K most frequent response tokens (+ special tokens) -> work/vocab.json
  4. train     the draft, initialised from the target's layers  -> work/checkpoint.npz
  5. export    float16 draft without the input embedding -> bundle/draft
  6. card      metrics.json and MODEL_CARD.md (specsample.train.token_draft_card)
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import random
import time
from typing import ClassVar

import numpy as np

from specsample.data import chat_prompts
from specsample.files import write_json
from specsample.models.decoder_only import DecoderOnly
from specsample.train import distill_decoder as dd
from specsample.train.optim import make_optimizer
from specsample.train.pipeline import PipelineRun, trained
from specsample.train.pipeline_data import (
  always_kept,
  batches_to_generate,
  earlier_training,
  encode,
  generate_batches,
  log,
  log_export,
  read_json,
  split_validation,
  train_with_progress,
  vocab_coverage,
  write_train_prompts,
  write_training_log,
  write_validation,
)
from specsample.train.resume import load_training_state, save_training_state
from specsample.train.target_responses import Response
from specsample.train.token_draft_options import STAGES, TokenDraftOptions

# Bench prompts per task (scaled to `bench_prompts`), from the held-out sources.
BENCH_TASKS = {"chat": 10, "explain_code": 7, "summarize": 7, "rewrite": 6, "key_points": 2,
               "docstring": 2, "question": 2, "error": 2}  # fmt: skip
MAX_BENCH_PROMPT_TOKENS = 320


# ---------------------------------------------------------------- 1. prompts


def write_bench_prompts(path: str, tokenizer, count: int, seed: int) -> None:
  """About `count` prompts of the held-out sources, by task as BENCH_TASKS (scaled), each
  at most MAX_BENCH_PROMPT_TOKENS ids -> `path`; nothing when `path` exists."""
  if os.path.exists(path):
    return
  by_task = chat_prompts.candidates("held_out", seed=seed)
  rng, bench = random.Random(seed + 7), []
  scale = count / sum(BENCH_TASKS.values())
  for task, number in BENCH_TASKS.items():
    pool = [p for p in by_task[task] if len(encode(tokenizer, p.prompt)) <= MAX_BENCH_PROMPT_TOKENS]
    bench += rng.sample(pool, min(len(pool), max(1, round(number * scale))))
  os.makedirs(os.path.dirname(path), exist_ok=True)
  chat_prompts.write_jsonl(bench[:count], path)
  log(f"prompts: {len(bench)} bench prompts (held-out sources) -> {path}")


# ---------------------------------------------------------------- 2. generate


def response_record(batch_id: str, index: int, task: str, temperature: float, r: Response):
  """A line of responses.jsonl (log-probabilities rounded to 3 decimals)."""
  return {
    "batch": batch_id, "index": index, "task": task, "temperature": temperature,
    "prompt": r.prompt, "tokens": r.tokens, "top_ids": r.top_ids.tolist(),
    "top_logprobs": np.round(r.top_logprobs, 3).tolist(),
    "prompt_top_ids": r.prompt_top_ids.tolist(),
    "prompt_top_logprobs": np.round(r.prompt_top_logprobs, 3).tolist(),
  }  # fmt: skip


def read_responses(path: str) -> list[dict]:
  """The records of responses.jsonl ([] when there is none); a line cut by an interrupted
  run is skipped."""
  if not os.path.exists(path):
    return []
  records = []
  with open(path, encoding="utf-8") as f:
    for line in f:
      try:
        records.append(json.loads(line))
      except json.JSONDecodeError:
        continue
  return records


def stage_generate(options: TokenDraftOptions, target, tokenizer) -> None:
  prompts = chat_prompts.read_jsonl(os.path.join(options.work, "train_prompts.jsonl"))
  path = os.path.join(options.work, "responses.jsonl")
  done = {r["batch"] for r in read_responses(path)}
  todo = batches_to_generate(
    options, prompts, tokenizer, lambda temperature, start: f"{temperature:g}/{start}", done
  )
  with open(path, "a", encoding="utf-8") as out:

    def write(batch_id, temperature, rows, responses):
      for (index, _), response in zip(rows, responses, strict=True):
        record = response_record(batch_id, index, prompts[index].task, temperature, response)
        out.write(json.dumps(record) + "\n")
      out.flush()
      return sum(len(r.tokens) for r in responses)

    _, minutes = generate_batches(
      target, todo, max_new_tokens=options.max_new_tokens, minutes=options.generate_minutes,
      seed=options.seed, write=write,
    )  # fmt: skip
  stats_path = os.path.join(options.work, "generation.json")
  records = read_responses(path)
  stats = {
    "generation_minutes": round(read_json(stats_path).get("generation_minutes", 0.0) + minutes, 1),
    "generated_responses": len(records),
    "generated_tokens": sum(len(r["tokens"]) for r in records),
    "prompt_positions_labelled": sum(len(r.get("prompt_top_ids", [])) for r in records),
    "greedy_responses": sum(r["temperature"] == 0 for r in records),
  }
  write_json(stats_path, stats)


# ---------------------------------------------------------------- 3. vocab


def load_responses(work: str, *, prompt_labels: bool = True):
  """(train, validation) lists of (task, Response) from work/responses.jsonl."""

  def response(r):
    has_prompt = prompt_labels and "prompt_top_ids" in r
    return r["task"], Response(
      prompt=r["prompt"], tokens=r["tokens"], top_ids=np.asarray(r["top_ids"], np.int32),
      top_logprobs=np.asarray(r["top_logprobs"], np.float32),
      prompt_top_ids=np.asarray(r["prompt_top_ids"], np.int32) if has_prompt else None,
      prompt_top_logprobs=np.asarray(r["prompt_top_logprobs"], np.float32) if has_prompt
      else None,
    )  # fmt: skip

  records = read_responses(os.path.join(work, "responses.jsonl"))
  train, validation = split_validation(records, lambda r: r["index"])
  return [response(r) for r in train], [response(r) for r in validation]


def stage_vocab(options: TokenDraftOptions, tokenizer) -> None:
  """The output vocabulary, and the share of response tokens each size covers: on the
  training responses (where the ids were counted) and on the validation responses."""
  path = os.path.join(options.work, "vocab.json")
  if os.path.exists(path):
    return
  train, validation = load_responses(options.work, prompt_labels=False)
  responses = [r.tokens for _, r in train]
  held = np.concatenate([r.tokens for _, r in validation] or [[0]])
  ids, held_out, coverage = vocab_coverage(
    responses, held, options.output_vocab, always_kept(tokenizer)
  )
  record = {"size": options.output_vocab, "coverage": held_out, "coverage_train": coverage,
            "ids": ids.tolist(), "response_tokens": sum(map(len, responses))}  # fmt: skip
  write_json(path, record)
  log(f"vocab: {options.output_vocab} tokens; response-token coverage by size: validation "
      f"{held_out}, train {coverage}")  # fmt: skip


# ---------------------------------------------------------------- 4. train


def make_draft(options: TokenDraftOptions, target: DecoderOnly) -> DecoderOnly:
  """The target's `layers`, its final norm and the output rows of work/vocab.json's ids."""
  with open(os.path.join(options.work, "vocab.json")) as f:
    ids = np.asarray(json.load(f)["ids"], np.int32)
  return dd.draft_from_target(target, [int(x) for x in options.layers.split(",")], ids)


def save_checkpoint(path: str, draft: DecoderOnly, opt_state, step: int) -> None:
  save_training_state(path, dd.split_embedding(draft.params)[0], opt_state, step)


def load_checkpoint(path: str, draft: DecoderOnly, settings: dd.DistillSettings):
  """(draft, opt_state, step) from `path`, shaped like `draft` and its optimizer state."""
  trainable, embedding = dd.split_embedding(draft.params)  # with output_ids, as saved
  opt_state = make_optimizer(settings).init({k: v for k, v in trainable.items()
                                             if k != "output_ids"})  # fmt: skip
  trainable, opt_state, step = load_training_state(path, trainable, opt_state)
  trainable["output_ids"] = np.asarray(trainable["output_ids"], np.int32)
  params = {**trainable, "embed": {"embedding": embedding}}
  return DecoderOnly(params=params, config=draft.config), opt_state, step


def stage_train(options: TokenDraftOptions, target: DecoderOnly) -> DecoderOnly:
  draft = make_draft(options, target)
  path = os.path.join(options.work, "checkpoint.npz")
  train, validation = load_responses(options.work)
  examples = [r for _, r in train]
  table = dd.index_map(draft.params["output_ids"], draft.config.vocab_size)
  tokens = sum(len(e.tokens) for e in examples)
  log(f"train: {len(examples)} responses ({tokens} response tokens), layers {options.layers}, "
      f"{dd.parameter_count(draft) / 1e6:.1f}M trainable parameters")  # fmt: skip
  settings = dd.DistillSettings(
    steps=options.train_steps, batch_size=options.batch_size,
    learning_rate=options.learning_rate, warmup_steps=min(100, options.train_steps // 10),
    soft_weight=options.soft_weight, max_seconds=60 * options.train_minutes, log_every=25,
    seed=options.seed,
  )  # fmt: skip
  opt_state, start = None, 0
  held = [r for _, r in validation][:48]
  draft, scale = dd.calibrate_output_scale(draft, dd.make_batch(held[:8], table))
  log(f"train: output layer scaled by {scale} at the start")
  if os.path.exists(path):
    draft, opt_state, start = load_checkpoint(path, draft, settings)
    log(f"train: resuming at step {start}")
  earlier, finished = earlier_training(options.work, settings.steps)
  if start < settings.steps and not finished:
    stream = dd.batches(examples, table, options.batch_size, options.seed, start=start,
                        prompt_weight=options.prompt_weight)  # fmt: skip
    begin = time.time()
    draft, _, history = train_with_progress(
      dd.distill, draft, lambda: next(stream), settings, opt_state=opt_state, start_step=start,
      label="distillation",
      save=functools.partial(save_checkpoint, path),
      validate=lambda model: dd.agreement(model, held),
    )  # fmt: skip
    write_training_log(
      options.work, earlier, history, (time.time() - begin) / 60, responses=len(examples),
      response_tokens=tokens, settings=dataclasses.asdict(options),
    )  # fmt: skip
  if finished and os.path.exists(os.path.join(options.work, "validation.json")):
    return draft
  write_validation(options.work, lambda items: dd.agreement(draft, [r for _, r in items]),
                   validation, task=lambda item: item[0])  # fmt: skip
  return draft


# ---------------------------------------------------------------- 5. export; the stages


def stage_export(options: TokenDraftOptions, draft: DecoderOnly) -> None:
  from specsample.checkpoints import save_hf_decoder_only

  directory = os.path.join(options.bundle, "draft")
  save_hf_decoder_only(draft, directory, dtype="float16", include_embedding=False)
  log_export(directory)


@dataclasses.dataclass(frozen=True)
class TokenDraftRecipe:
  """The token-level draft's stages (specsample.train.pipeline.Recipe): its float32
  target's responses and top-k log-probabilities, a decoder draft started from the
  target's layers and distilled on them (DistillSpec)."""

  options: TokenDraftOptions = TokenDraftOptions()
  name: ClassVar[str] = "token draft"
  stages: ClassVar[tuple[str, ...]] = STAGES
  target_activations: ClassVar[str] = "float32"  # the draft starts from its float32 layers

  def run_stage(self, stage: str, run: PipelineRun) -> None:
    options = self.options
    if stage == "prompts":
      path = os.path.join(options.work, "train_prompts.jsonl")
      write_train_prompts(path, run.tokenizer, options.train_prompts, options.seed)
      bench_path = os.path.join(options.bundle, "prompts.jsonl")
      write_bench_prompts(bench_path, run.tokenizer, options.bench_prompts, options.seed)
    elif stage == "generate":
      stage_generate(options, run.target, run.tokenizer)
    elif stage == "vocab":
      stage_vocab(options, run.tokenizer)
    elif stage == "train":
      run.draft = stage_train(options, run.target)
    elif stage == "export":
      stage_export(options, trained(run, self.name))
    elif stage == "card":
      from specsample.checkpoints import load_model
      from specsample.train import token_draft_card as card

      embedding = run.target.params["embed"]["embedding"]
      shipped = load_model(os.path.join(options.bundle, "draft"), shared_embedding=embedding)
      card.write_card(options, card.write_metrics(options, shipped))
