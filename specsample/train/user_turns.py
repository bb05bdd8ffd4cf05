"""User turns written by the target itself, as prompts of on-policy training data.

A chat model fed its chat template up to the start of a user's message writes a user's
message (Magpie, Xu et al. 2024, "Alignment Data Synthesis from Scratch by Prompting
Aligned LLMs with Nothing"). Those turns are in the distribution of what a chat model is
asked: closer to chat prompts and Spec-Bench's questions than prompts built from the
machine's files (`specsample.data.chat_prompts`), whose responses the draft learns less
from for chat. Each row of a batch starts with an opener of a task (`OPENERS`: "Write",
"Translate", "Summarize", ..., or nothing), drawn in `TURN_MIX` proportions, so the turns
cover Spec-Bench's categories.

A turn directory is resumable and small enough to commit:

  turns.json          what the turns are of (the target file, its arithmetic, the
                      sampling, the batch shape and the seed); a resumed run with other
                      settings is refused
  chunks/NNNNN.json.gz  compressed, written atomically, never rewritten: the numbers of
                      the batches run, the turns kept, how many were left out and why,
                      and the seconds they took

Batch b's openers and sampling key depend only on (seed, b), so two runs of half the
batches write what one run of them all writes. A turn is kept when it ended (EOS within
`max_turn_tokens`), holds no control token, has at least `MIN_CHARACTERS` characters, is
not one of the prompts we evaluate on (`excluded`) and was not kept before.
"""

from __future__ import annotations

import dataclasses
import glob
import gzip
import json
import os
import random
import time
import zlib
from collections.abc import Callable, Collection

import numpy as np

from specsample.core.sampling import SamplingConfig
from specsample.data.chat_prompts import ChatPrompt
from specsample.decoding import generate
from specsample.files import write_bytes, write_json
from specsample.train.target_responses import right_pad

TURNS_VERSION = 1
MIN_CHARACTERS = 12  # shorter turns ("Hi", "Summarize:") are left out

# Openers by task (Spec-Bench's categories; "" lets the model start the turn itself).
OPENERS: dict[str, tuple[str, ...]] = {
  "chat": ("", "", "Hi", "I", "Can you", "Do you", "I need"),
  "writing": ("Write", "Compose", "Draft", "Create"),
  "roleplay": ("Imagine you are", "Pretend you are", "Act as"),
  "reasoning": ("Why", "If", "Suppose", "Is it true that"),
  "math": ("Solve", "Calculate", "Find", "What is the value of"),
  "coding": ("Write a Python function", "How do I", "Fix this code", "Write a program"),
  "extraction": ("Extract", "List all", "From the following text, identify"),
  "stem": ("Explain", "How does", "What is the difference between"),
  "humanities": ("Discuss", "What was", "Describe the history of"),
  "translation": ("Translate", "Translate the following sentence into"),
  "summarization": ("Summarize", "Give a short summary of"),
  "qa": ("What", "Who", "When", "Where", "How many"),
  "rag": ("Based on the following passage", "Read the text below and answer"),
}
TURN_MIX = {"chat": 0.16, "writing": 0.1, "roleplay": 0.06, "reasoning": 0.07, "math": 0.08,
            "coding": 0.1, "extraction": 0.06, "stem": 0.08, "humanities": 0.06,
            "translation": 0.06, "summarization": 0.06, "qa": 0.07, "rag": 0.04}  # fmt: skip


class TurnsError(RuntimeError):
  """A turn directory cannot be used as asked (other settings, a bad file)."""


@dataclasses.dataclass(frozen=True)
class TurnSettings:
  """What a turn directory's turns are of; a resumed run must name the same."""

  target: str  # the target file's name
  target_bytes: int  # and size
  activations: str  # the target's arithmetic
  batch_size: int = 32  # rows per call (every call has this shape)
  max_turn_tokens: int = 160  # a turn not ended by then is left out
  temperature: float = 1.0
  top_p: float = 0.95
  seed: int = 0

  def to_json(self) -> dict:
    return {"version": TURNS_VERSION, **dataclasses.asdict(self)}

  @classmethod
  def from_json(cls, record: dict) -> TurnSettings:
    if record.get("version") != TURNS_VERSION:
      raise TurnsError(f"turns version {record.get('version')}; this code reads {TURNS_VERSION}")
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in record.items() if k in names})


def batch_tasks(batch: int, settings: TurnSettings) -> list[tuple[str, str]]:
  """(task, opener) of each row of batch `batch`: a function of (seed, batch) alone."""
  rng = random.Random(f"{settings.seed}:{batch}")
  tasks = rng.choices(list(TURN_MIX), weights=list(TURN_MIX.values()), k=settings.batch_size)
  return [(task, rng.choice(OPENERS[task])) for task in tasks]


def turn_prefix(tokenizer) -> list[int]:
  """The chat template's ids up to where the user's message begins."""
  marker = "\u2063"  # a character no template writes
  ids = tokenizer.apply_chat_template([{"role": "user", "content": marker}])
  marker_ids = tokenizer.encode(marker)
  for start in range(len(ids) - len(marker_ids) + 1):
    if ids[start : start + len(marker_ids)] == marker_ids:
      return ids[:start]
  raise TurnsError("the chat template's user message could not be located in its ids")


def is_control(tokenizer, token: int) -> bool:
  """Whether `token` is a control token (EOS, <|im_start|>, ...: decoding skips it)."""
  return token == tokenizer.eos_id or tokenizer.decode([token]) == ""


@dataclasses.dataclass(frozen=True)
class TurnChunk:
  """The turns of whole batches, and what they cost."""

  batches: tuple[int, ...]
  turns: tuple[ChatPrompt, ...]
  left_out: dict[str, int]  # reason -> turns
  seconds: float


class TurnDirectory:
  """The files of one turn directory (see the module docstring)."""

  def __init__(self, root: str):
    self.root = root
    self.settings_path = os.path.join(root, "turns.json")
    self.chunk_dir = os.path.join(root, "chunks")

  def open(self, settings: TurnSettings) -> None:
    """Creates the directory with `settings`, or checks that an existing one has them."""
    if os.path.exists(self.settings_path):
      kept = self.settings()
      if kept != settings:
        changed = ", ".join(f"{f.name}: kept {getattr(kept, f.name)!r}, asked "
                            f"{getattr(settings, f.name)!r}" for f in dataclasses.fields(kept)
                            if getattr(kept, f.name) != getattr(settings, f.name))  # fmt: skip
        raise TurnsError(f"{self.root} holds turns of other settings ({changed})")
      return
    os.makedirs(self.chunk_dir, exist_ok=True)
    write_json(self.settings_path, settings.to_json(), indent=1)

  def settings(self) -> TurnSettings:
    if not os.path.exists(self.settings_path):
      raise TurnsError(f"{self.root} is not a turn directory (no turns.json)")
    with open(self.settings_path) as f:
      return TurnSettings.from_json(json.load(f))

  def chunk_paths(self) -> list[str]:
    return sorted(glob.glob(os.path.join(self.chunk_dir, "*.json.gz")))

  def append(self, chunk: TurnChunk) -> str:
    paths = self.chunk_paths()
    number = int(os.path.basename(paths[-1]).split(".")[0]) + 1 if paths else 0
    path = os.path.join(self.chunk_dir, f"{number:05d}.json.gz")
    record = {"batches": list(chunk.batches), "left_out": chunk.left_out,
              "seconds": round(chunk.seconds, 2),
              "turns": [dataclasses.asdict(t) for t in chunk.turns]}  # fmt: skip
    os.makedirs(self.chunk_dir, exist_ok=True)
    write_bytes(path, gzip.compress(json.dumps(record, ensure_ascii=False).encode(), mtime=0))
    return path

  def chunks(self) -> list[TurnChunk]:
    chunks = []
    for path in self.chunk_paths():
      try:
        with gzip.open(path, "rt", encoding="utf-8") as f:
          record = json.load(f)
        turns = tuple(ChatPrompt(t["task"], t["prompt"], t["source"]) for t in record["turns"])
        chunks.append(TurnChunk(tuple(record["batches"]), turns, record["left_out"],
                                record["seconds"]))  # fmt: skip
      except (OSError, KeyError, ValueError) as error:
        raise TurnsError(f"{path}: not a readable turn chunk ({error})") from error
    return chunks

  def turns(self) -> list[ChatPrompt]:
    """Every kept turn, in the order written."""
    return [turn for chunk in self.chunks() for turn in chunk.turns]

  def summary(self) -> dict:
    chunks = self.chunks()
    left_out: dict[str, int] = {}
    for chunk in chunks:
      for reason, count in chunk.left_out.items():
        left_out[reason] = left_out.get(reason, 0) + count
    seconds = sum(c.seconds for c in chunks)
    return {"batches": sum(len(c.batches) for c in chunks),
            "turns": sum(len(c.turns) for c in chunks), "left_out": left_out,
            "seconds": round(seconds, 1)}  # fmt: skip


def write_batch(
  target, tokenizer, batch: int, settings: TurnSettings, prefix: list[int]
) -> list[tuple[str, str, str | None]]:
  """The turns of one batch: (task, text, why it is left out or None) per row."""
  rows = batch_tasks(batch, settings)
  starts = [prefix + (tokenizer.encode(opener) if opener else []) for _, opener in rows]
  longest = max(len(tokenizer.encode(o)) for openers in OPENERS.values() for o in openers)
  width = -(-(len(prefix) + longest) // 16) * 16  # one program for every batch
  output = generate(
    target, right_pad(starts, width, target.pad_id),
    prompt_lengths=np.asarray([len(s) for s in starts], np.int32),
    max_new_tokens=settings.max_turn_tokens,
    sampling=SamplingConfig(temperature=settings.temperature, top_p=settings.top_p),
    seed=zlib.crc32(f"turns:{settings.seed}:{batch}".encode()),
  )  # fmt: skip
  tokens, counts = np.asarray(output.tokens), np.asarray(output.lengths)  # [b, max], [b]
  turns = []
  for row, ((task, _), start) in enumerate(zip(rows, starts, strict=True)):
    ids = [int(t) for t in tokens[row, : counts[row]]]
    why = None
    if not ids or ids[-1] != tokenizer.eos_id:
      why = "unfinished"
    elif any(is_control(tokenizer, t) for t in ids[:-1]):
      why = "control token"
    text = tokenizer.decode(start[len(prefix) :] + ids[:-1]).strip() if why is None else ""
    if why is None and len(text) < MIN_CHARACTERS:
      why = "too short"
    turns.append((task, text, why))
  return turns


@dataclasses.dataclass(frozen=True)
class TurnReport:
  batches_done: int  # before this run
  batches_run: int
  turns_kept: int  # by this run
  seconds: float


def write_turns(
  target,
  tokenizer,
  directory: TurnDirectory,
  *,
  batches: int,
  minutes: float,
  excluded: Collection[str] = (),
  chunk_minutes: float = 5.0,
  progress: Callable[[int, int, int], None] | None = None,
) -> TurnReport:
  """Runs batches 0..batches-1 not yet in `directory` until `minutes` are spent (a batch
  is not begun when the last one's time would overrun the budget), writing a chunk every
  `chunk_minutes` and at the end. progress(batches run, batches to run, turns kept)."""
  settings = directory.settings()
  prefix = turn_prefix(tokenizer)
  chunks = directory.chunks()
  done = {b for c in chunks for b in c.batches}
  seen = {t.prompt for c in chunks for t in c.turns} | set(excluded)
  todo = [b for b in range(batches) if b not in done]
  begin = time.time()
  deadline = begin + 60 * minutes
  pending_batches: list[int] = []
  pending_turns: list[ChatPrompt] = []
  left_out: dict[str, int] = {}
  pending_since, last, run, kept = begin, 0.0, 0, 0

  def flush(now: float) -> None:
    nonlocal pending_batches, pending_turns, left_out, pending_since
    if pending_batches:
      chunk = TurnChunk(tuple(pending_batches), tuple(pending_turns), left_out,
                        now - pending_since)  # fmt: skip
      directory.append(chunk)
    pending_batches, pending_turns, left_out, pending_since = [], [], {}, now

  for batch in todo:
    start = time.time()
    if start + last > deadline:
      break
    for row, (task, text, why) in enumerate(write_batch(target, tokenizer, batch, settings,
                                                        prefix)):  # fmt: skip
      if why is None and text in seen:
        why = "repeated or evaluated"
      if why is not None:
        left_out[why] = left_out.get(why, 0) + 1
        continue
      seen.add(text)
      pending_turns.append(ChatPrompt(task, text, f"turn:{settings.seed}:{batch}:{row}"))
      kept += 1
    now = time.time()
    last = now - start
    pending_batches.append(batch)
    run += 1
    if now - pending_since > 60 * chunk_minutes:
      flush(now)
    if progress is not None:
      progress(run, len(todo), kept)
  flush(time.time())
  return TurnReport(len(done), run, kept, time.time() - begin)
