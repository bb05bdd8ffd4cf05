"""The target's on-policy responses as committed token ids: a store that a training run
appends to under a time budget and a later run, on another machine, resumes.

A store is a directory outside the installed package (the repository's
`training_data/<target>/`), small enough to commit:

  store.json          what the responses are of: the target file (name and size), its
                      arithmetic, the generation settings and the plan's seed. A resumed run
                      with other settings is refused (its batches would not be the plan's).
  prompts.jsonl.gz    the planned prompts (task, prompt, source), written once: prompts are
                      built from files of the machine (man pages, catalogs), which differ
                      between machines, so the plan is kept, not rebuilt.
  shards/NNNNN.npz    compressed, written atomically, never rewritten: the responses of
                      whole generation batches (prompt index, temperature, the prompt's
                      token count, the response's token ids as uint16, the batch ids) and
                      the seconds they took.

Prompt token ids are not stored: they are the tokenizer's encoding of the kept prompt, and
`read_responses` checks each count against the stored one (a tokenizer that changed is an
error, not a silent shift). Features and the target's probabilities are never stored: the
training stage recomputes them from these ids.
"""

from __future__ import annotations

import dataclasses
import glob
import gzip
import io
import json
import os
from collections.abc import Sequence

import numpy as np

from specsample.data import chat_prompts
from specsample.files import write_bytes, write_json

STORE_VERSION = 1
MAX_TOKEN_ID = np.iinfo(np.uint16).max  # ids are stored as uint16


class StoreError(RuntimeError):
  """A store cannot be used as asked (other settings, a changed tokenizer, a bad file)."""


@dataclasses.dataclass(frozen=True)
class StoreSettings:
  """What a store's responses are of; a run that resumes it must name the same."""

  target: str  # the target file's name
  target_bytes: int  # and size (a different file of the same name is refused)
  activations: str  # the target's arithmetic ("int8", "float32", ...)
  max_new_tokens: int
  batch_size: int  # rows per generation call (every call has this shape)
  widths: tuple[int, ...]  # the prompt widths a batch is padded to (one program each)
  sampled_every: int  # every n-th prompt is sampled at temperature 1, the others greedy
  seed: int  # the plan's order and the sampled rows' keys

  def to_json(self) -> dict:
    return {"version": STORE_VERSION, **dataclasses.asdict(self), "widths": list(self.widths)}

  @classmethod
  def from_json(cls, record: dict) -> StoreSettings:
    if record.get("version") != STORE_VERSION:
      raise StoreError(f"store version {record.get('version')}; this code reads {STORE_VERSION}")
    fields = {f.name for f in dataclasses.fields(cls)}
    values = {k: v for k, v in record.items() if k in fields}
    return cls(**{**values, "widths": tuple(values["widths"])})


@dataclasses.dataclass(frozen=True)
class StoredResponse:
  """One prompt's response as the store keeps it."""

  index: int  # the prompt's index in the store's prompts
  temperature: float
  prompt_tokens: int  # the prompt's token count when it was generated
  tokens: np.ndarray  # int32[n] the response (EOS included when it ended there)


@dataclasses.dataclass(frozen=True)
class Shard:
  """Responses of whole batches, and what they cost."""

  batch_ids: tuple[str, ...]
  responses: tuple[StoredResponse, ...]
  seconds: float  # generation time of these batches (compilation included)


class ResponseStore:
  """The files of one store directory (see the module docstring)."""

  def __init__(self, root: str):
    self.root = root
    self.settings_path = os.path.join(root, "store.json")
    self.prompts_path = os.path.join(root, "prompts.jsonl.gz")
    self.shard_dir = os.path.join(root, "shards")

  # ------------------------------------------------------------ settings and prompts

  def open(self, settings: StoreSettings) -> None:
    """Creates the store with `settings`, or checks that an existing one has them."""
    if os.path.exists(self.settings_path):
      kept = self.settings()
      if kept != settings:
        changed = [f.name for f in dataclasses.fields(StoreSettings)
                   if getattr(kept, f.name) != getattr(settings, f.name)]  # fmt: skip
        details = ", ".join(f"{n}: kept {getattr(kept, n)!r}, asked {getattr(settings, n)!r}"
                            for n in changed)  # fmt: skip
        raise StoreError(f"{self.root} holds responses of other settings ({details}); "
                         "resume with the kept settings or use another store")  # fmt: skip
      return
    os.makedirs(self.shard_dir, exist_ok=True)
    write_json(self.settings_path, settings.to_json(), indent=1)

  def settings(self) -> StoreSettings:
    if not os.path.exists(self.settings_path):
      raise StoreError(f"{self.root} is not a response store (no store.json)")
    with open(self.settings_path) as f:
      return StoreSettings.from_json(json.load(f))

  def has_prompts(self) -> bool:
    return os.path.exists(self.prompts_path)

  def write_prompts(self, prompts: Sequence[chat_prompts.ChatPrompt]) -> None:
    """Keeps the plan's prompts (once: a store's prompts never change)."""
    if self.has_prompts():
      raise StoreError(f"{self.prompts_path} exists: a store's prompts are written once")
    text = "".join(prompt.to_json() + "\n" for prompt in prompts)
    write_bytes(self.prompts_path, gzip.compress(text.encode("utf-8"), mtime=0))

  def prompts(self) -> list[chat_prompts.ChatPrompt]:
    if not self.has_prompts():
      raise StoreError(f"{self.root} has no prompts yet (run the prompts stage)")
    with gzip.open(self.prompts_path, "rt", encoding="utf-8") as f:
      return [chat_prompts.ChatPrompt.from_json(line) for line in f if line.strip()]

  # ------------------------------------------------------------ shards

  def shard_paths(self) -> list[str]:
    return sorted(glob.glob(os.path.join(self.shard_dir, "*.npz")))

  def append(self, shard: Shard) -> str:
    """Writes `shard` as the next numbered file (atomically). -> its path."""
    if not shard.responses:
      raise ValueError("a shard holds at least one response")
    paths = self.shard_paths()
    number = int(os.path.basename(paths[-1])[:-4]) + 1 if paths else 0
    path = os.path.join(self.shard_dir, f"{number:05d}.npz")
    tokens = [r.tokens for r in shard.responses]
    if any(t.size and (t.min() < 0 or t.max() > MAX_TOKEN_ID) for t in tokens):
      raise StoreError(f"token ids outside 0..{MAX_TOKEN_ID} cannot be stored as uint16")
    buffer = io.BytesIO()
    np.savez_compressed(
      buffer,
      batch_ids=np.asarray(shard.batch_ids),
      index=np.asarray([r.index for r in shard.responses], np.int32),
      temperature=np.asarray([r.temperature for r in shard.responses], np.float32),
      prompt_tokens=np.asarray([r.prompt_tokens for r in shard.responses], np.int32),
      lengths=np.asarray([len(t) for t in tokens], np.int32),
      tokens=np.concatenate(tokens).astype(np.uint16),
      seconds=np.float64(shard.seconds),
    )
    os.makedirs(self.shard_dir, exist_ok=True)
    write_bytes(path, buffer.getvalue())
    return path

  def shards(self) -> list[Shard]:
    return [read_shard(path) for path in self.shard_paths()]

  def done_batches(self) -> set[str]:
    done: set[str] = set()
    for path in self.shard_paths():
      with np.load(path) as saved:
        done.update(str(b) for b in saved["batch_ids"])
    return done

  def summary(self) -> dict:
    """Rows, response tokens and generation seconds over every shard."""
    shards = self.shards()
    tokens = sum(int(sum(len(r.tokens) for r in s.responses)) for s in shards)
    seconds = sum(s.seconds for s in shards)
    return {"shards": len(shards), "batches": sum(len(s.batch_ids) for s in shards),
            "responses": sum(len(s.responses) for s in shards), "response_tokens": tokens,
            "seconds": round(seconds, 1),
            "tokens_per_second": round(tokens / seconds, 1) if seconds else None}  # fmt: skip


def read_shard(path: str) -> Shard:
  try:
    with np.load(path) as saved:
      lengths = saved["lengths"]
      pieces = np.split(saved["tokens"].astype(np.int32), np.cumsum(lengths)[:-1])
      responses = tuple(
        StoredResponse(int(i), float(t), int(p), tokens)
        for i, t, p, tokens in zip(saved["index"], saved["temperature"],
                                   saved["prompt_tokens"], pieces, strict=True)
      )  # fmt: skip
      return Shard(tuple(str(b) for b in saved["batch_ids"]), responses, float(saved["seconds"]))
  except (OSError, KeyError, ValueError) as error:
    raise StoreError(f"{path}: not a readable response shard ({error})") from error


@dataclasses.dataclass(frozen=True)
class TrainingSequence:
  """A prompt and its response as token ids, for training."""

  index: int
  task: str
  prompt: np.ndarray  # int32[p] chat template applied
  response: np.ndarray  # int32[n]
  temperature: float


def read_responses(
  store: ResponseStore, encode, *, paths: Sequence[str] | None = None, prompts=None
) -> list[TrainingSequence]:
  """Every stored response (of the shard files `paths`, default all) with its prompt's ids
  (`encode(text)`: the chat-templated ids), in the store's order; `prompts`: the store's
  prompts when already read. StoreError: a prompt's count differs from the stored one."""
  prompts = store.prompts() if prompts is None else prompts
  sequences = []
  for path in store.shard_paths() if paths is None else paths:
    for r in read_shard(path).responses:
      ids = np.asarray(encode(prompts[r.index].prompt), np.int32)
      if len(ids) != r.prompt_tokens:
        raise StoreError(f"prompt {r.index} encodes to {len(ids)} tokens, the store's "
                         f"response followed {r.prompt_tokens}: the tokenizer changed")  # fmt: skip
      task = prompts[r.index].task
      sequences.append(TrainingSequence(r.index, task, ids, r.tokens, r.temperature))
  return sequences
