"""On-policy responses of a target, generated in batches of one fixed shape per prompt
width, under a time budget, into a committed `ResponseStore` that a later run resumes.

The plan: every `sampled_every`-th prompt is sampled at temperature 1, the others are
greedy; within each temperature the prompts are sorted by length and bucketed by the
smallest of `settings.widths` that holds them, then cut into batches of exactly
`batch_size` rows (a bucket's last batch is filled with copies of its first row, whose
responses are dropped). So plain decoding compiles one program per (width, temperature)
whatever the prompts, and a batch's prompts have similar lengths (little padding). The
batches run in an order shuffled with the plan's seed, so a run cut short by its budget
still covers every task and length; a batch's sampling key comes from its id, so a resumed
run draws what an uninterrupted one would.
"""

from __future__ import annotations

import dataclasses
import random
import time
import zlib
from collections.abc import Callable, Sequence

import numpy as np

from specsample.core.sampling import SamplingConfig
from specsample.decoding import generate
from specsample.train.response_store import (
  ResponseStore,
  Shard,
  StoredResponse,
  StoreSettings,
)
from specsample.train.target_responses import right_pad


@dataclasses.dataclass(frozen=True)
class PlannedBatch:
  batch_id: str  # "t<temperature>-w<width>-<number>", unique in a plan
  temperature: float
  width: int  # the prompts are right-padded to this many tokens
  rows: tuple[tuple[int, tuple[int, ...]], ...]  # (prompt index, prompt ids), <= batch_size


def temperature_of(index: int, settings: StoreSettings) -> float:
  return 1.0 if settings.sampled_every and index % settings.sampled_every == 0 else 0.0


def width_of(length: int, widths: Sequence[int]) -> int | None:
  """The smallest width that holds `length` tokens (None: longer than every width)."""
  return next((w for w in sorted(widths) if length <= w), None)


def plan_batches(encoded: Sequence[Sequence[int]], settings: StoreSettings) -> list[PlannedBatch]:
  """The batches of every prompt (`encoded[i]`: prompt i's ids) that fits the widest width,
  in the plan's shuffled order."""
  groups: dict[tuple[float, int], list[tuple[int, tuple[int, ...]]]] = {}
  for index, ids in enumerate(encoded):
    width = width_of(len(ids), settings.widths)
    if width is not None:
      groups.setdefault((temperature_of(index, settings), width), []).append((index, tuple(ids)))
  batches = []
  for (temperature, width), rows in sorted(groups.items()):
    rows.sort(key=lambda row: (len(row[1]), row[0]))
    for number, start in enumerate(range(0, len(rows), settings.batch_size)):
      batch_id = f"t{temperature:g}-w{width}-{number:04d}"
      chunk = tuple(rows[start : start + settings.batch_size])
      batches.append(PlannedBatch(batch_id, temperature, width, chunk))
  random.Random(settings.seed).shuffle(batches)
  return batches


def batch_key(batch: PlannedBatch, settings: StoreSettings) -> int:
  """The sampling seed of a batch: a function of its id (stable across resumed runs)."""
  return zlib.crc32(f"{settings.seed}:{batch.batch_id}".encode())


def generate_batch(target, batch: PlannedBatch, settings: StoreSettings) -> list[StoredResponse]:
  """The target's responses to one planned batch (plain decoding of [batch_size, width])."""
  rows = list(batch.rows) + [batch.rows[0]] * (settings.batch_size - len(batch.rows))
  prompts = right_pad([ids for _, ids in rows], batch.width, target.pad_id)
  lengths = np.asarray([len(ids) for _, ids in rows], np.int32)
  output = generate(
    target, prompts, prompt_lengths=lengths, max_new_tokens=settings.max_new_tokens,
    sampling=SamplingConfig(temperature=batch.temperature), seed=batch_key(batch, settings),
  )  # fmt: skip
  tokens, counts = np.asarray(output.tokens), np.asarray(output.lengths)  # [b, max_new], [b]
  return [
    StoredResponse(index, batch.temperature, len(ids), tokens[row, : counts[row]].astype(np.int32))
    for row, (index, ids) in enumerate(batch.rows)
  ]


@dataclasses.dataclass(frozen=True)
class GenerationReport:
  batches_done: int  # before this run
  batches_run: int
  batches_left: int
  response_tokens: int  # of this run
  seconds: float

  @property
  def tokens_per_second(self) -> float:
    return self.response_tokens / self.seconds if self.seconds else 0.0


def generate_into(
  target,
  store: ResponseStore,
  encoded: Sequence[Sequence[int]],
  *,
  minutes: float,
  shard_minutes: float = 5.0,
  max_batches: int | None = None,
  progress: Callable[[int, int, float], None] | None = None,
) -> GenerationReport:
  """Runs the store's planned batches not yet done until `minutes` are spent (a batch is
  not begun when the last one's time would overrun the budget), writing a shard every
  `shard_minutes` and at the end; `max_batches`: at most so many batches. `encoded[i]`:
  the store's prompt i's ids. progress(batches run, batches to run, response tokens per
  second)."""
  settings = store.settings()
  done = store.done_batches()
  todo = [b for b in plan_batches(encoded, settings) if b.batch_id not in done]
  begin = time.time()
  deadline = begin + 60 * minutes
  pending: list[tuple[str, list[StoredResponse]]] = []
  pending_since, last, run, tokens = begin, 0.0, 0, 0

  def flush(now: float) -> None:
    nonlocal pending, pending_since
    if pending:
      responses = tuple(r for _, batch in pending for r in batch)
      store.append(Shard(tuple(b for b, _ in pending), responses, now - pending_since))
    pending, pending_since = [], now

  for batch in todo[:max_batches]:
    start = time.time()
    if start + last > deadline:
      break
    responses = generate_batch(target, batch, settings)
    now = time.time()
    last = now - start
    pending.append((batch.batch_id, responses))
    run += 1
    tokens += sum(len(r.tokens) for r in responses)
    if now - pending_since > 60 * shard_minutes:
      flush(now)
    if progress is not None:
      progress(run, len(todo), tokens / (now - begin))
  flush(time.time())
  return GenerationReport(len(done), run, len(todo) - run, tokens, time.time() - begin)
