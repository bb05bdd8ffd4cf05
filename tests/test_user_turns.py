"""User turns the target writes itself: the template's prefix, what is kept and why, and
a resumable turn directory whose two half runs write what one run writes."""

from __future__ import annotations

import dataclasses
import types

import numpy as np
import pytest
from tiny_models import FEATURE_TARGET

from specsample.data.chat_prompts import ChatPrompt
from specsample.models import DecoderOnly
from specsample.train import on_policy_stages, user_turns
from specsample.train.pipeline_data import StageError
from specsample.train.user_turns import TurnDirectory, TurnsError, TurnSettings

SETTINGS = TurnSettings(target="toy", target_bytes=1, activations="float32", batch_size=8,
                        max_turn_tokens=48, temperature=1.0, top_p=0.95, seed=3)  # fmt: skip


class ToyTokenizer:
  """One id per printable character (3..95); 0 pad, 1 EOS, 2 a control token; the chat
  template: <2> "user:" message <1> <2> "bot:"."""

  eos_id = 1

  def encode(self, text: str) -> list[int]:
    return [3 + (ord(c) - 32) % 93 for c in text]

  def decode(self, ids) -> str:
    return "".join(chr(32 + i - 3) for i in ids if i >= 3)

  def apply_chat_template(self, messages) -> list[int]:
    message = self.encode(messages[0]["content"])
    return [2, *self.encode("user:"), *message, 1, 2, *self.encode("bot:")]


TOKENIZER = ToyTokenizer()


@pytest.fixture(scope="module")
def target():
  return DecoderOnly.init_random(FEATURE_TARGET.replace(num_heads=2, num_kv_heads=1,
                                                        head_dim=16), seed=2)  # fmt: skip


def test_the_prefix_is_the_template_before_the_users_message():
  assert user_turns.turn_prefix(TOKENIZER) == [2, *TOKENIZER.encode("user:")]


def test_batch_tasks_depend_on_the_seed_and_batch_alone():
  first = user_turns.batch_tasks(4, SETTINGS)
  assert first == user_turns.batch_tasks(4, SETTINGS)
  assert len(first) == SETTINGS.batch_size
  assert all(opener in user_turns.OPENERS[task] for task, opener in first)
  assert first != user_turns.batch_tasks(5, SETTINGS)
  assert first != user_turns.batch_tasks(4, dataclasses.replace(SETTINGS, seed=4))
  assert set(user_turns.TURN_MIX) == set(user_turns.OPENERS)


def test_only_ended_clean_new_turns_of_enough_characters_are_kept(monkeypatch, tmp_path):
  enc = TOKENIZER.encode
  outputs = [  # what the target "writes" after each row's opener
    enc(" a fine question about tides?") + [1],  # kept
    enc(" no end in sight"),  # unfinished: no EOS
    enc(" a turn") + [2] + enc(" with a control token") + [1],
    enc(" hi") + [1],  # too short, with its opener
    enc(" a fine question about tides?") + [1],  # kept above already
    enc(" the evaluated prompt") + [1],
    [1],  # nothing at all
    enc(" another fine question?") + [1, 0, 0],  # padding after EOS is not the turn's
  ]
  settings = dataclasses.replace(SETTINGS, batch_size=len(outputs))
  tasks = [("chat", "")] * len(outputs)
  monkeypatch.setattr(user_turns, "batch_tasks", lambda batch, settings: tasks)

  def fake_generate(target, prompts, *, prompt_lengths, max_new_tokens, sampling, seed):
    assert prompts.shape[1] % 16 == 0 and sampling.top_p == settings.top_p
    lengths = np.asarray([o.index(1) + 1 if 1 in o else len(o) for o in outputs], np.int32)
    tokens = np.zeros((len(outputs), max_new_tokens), np.int32)
    for row, output in enumerate(outputs):
      tokens[row, : len(output)] = output
    return types.SimpleNamespace(tokens=tokens, lengths=lengths)

  monkeypatch.setattr(user_turns, "generate", fake_generate)
  directory = TurnDirectory(str(tmp_path / "turns"))
  directory.open(settings)
  report = user_turns.write_turns(types.SimpleNamespace(pad_id=0), TOKENIZER, directory,
                                  batches=1, minutes=5,
                                  excluded={"the evaluated prompt"})  # fmt: skip
  assert [t.prompt for t in directory.turns()] == ["a fine question about tides?",
                                                   "another fine question?"]  # fmt: skip
  assert report.turns_kept == 2 and report.batches_run == 1
  (chunk,) = directory.chunks()
  assert chunk.left_out == {"unfinished": 1, "control token": 1, "too short": 2,
                            "repeated or evaluated": 2}  # fmt: skip
  assert [t.source for t in chunk.turns] == ["turn:3:0:0", "turn:3:0:7"]


def test_two_half_runs_write_what_one_run_writes(target, tmp_path):
  whole = TurnDirectory(str(tmp_path / "whole"))
  whole.open(SETTINGS)
  user_turns.write_turns(target, TOKENIZER, whole, batches=4, minutes=10)
  halves = TurnDirectory(str(tmp_path / "halves"))
  halves.open(SETTINGS)
  first = user_turns.write_turns(target, TOKENIZER, halves, batches=2, minutes=10)
  second = user_turns.write_turns(target, TOKENIZER, halves, batches=4, minutes=10)
  assert (first.batches_run, second.batches_done, second.batches_run) == (2, 2, 2)
  assert whole.turns(), "the toy target ended no turn: the test would prove nothing"
  assert halves.turns() == whole.turns()
  assert [c.batches for c in halves.chunks()] == [(0, 1), (2, 3)]
  assert halves.summary()["turns"] == len(whole.turns())
  again = user_turns.write_turns(target, TOKENIZER, halves, batches=4, minutes=10)
  assert again.batches_run == 0 and len(halves.chunks()) == 2  # nothing left to do


def test_a_directory_refuses_other_settings_and_bad_files(tmp_path):
  directory = TurnDirectory(str(tmp_path / "turns"))
  directory.open(SETTINGS)
  directory.open(SETTINGS)  # the same settings: fine
  with pytest.raises(TurnsError, match="top_p: kept 0.95, asked 0.9"):
    directory.open(dataclasses.replace(SETTINGS, top_p=0.9))
  with pytest.raises(TurnsError, match="no turns.json"):
    TurnDirectory(str(tmp_path / "none")).settings()
  (tmp_path / "turns" / "chunks" / "00000.json.gz").write_bytes(b"not gzip")
  with pytest.raises(TurnsError, match="not a readable turn chunk"):
    directory.turns()


def test_a_store_plans_its_prompts_from_the_turns(monkeypatch, tmp_path):
  directory = TurnDirectory(str(tmp_path / "turns"))
  directory.open(SETTINGS)
  turns = [ChatPrompt("chat", text, f"turn:3:0:{i}") for i, text in
           enumerate(["first turn here", "a bench prompt", "far too long " * 9, "fourth turn",
                      "fifth turn"])]  # fmt: skip
  directory.append(user_turns.TurnChunk((0,), tuple(turns), {}, 1.0))
  monkeypatch.setattr(on_policy_stages, "evaluation_prompts", lambda: {"a bench prompt"})
  fits = lambda p: len(p.prompt) <= 20  # noqa: E731
  kept = on_policy_stages.turn_prompts(directory.root, 2, fits)
  assert [p.prompt for p in kept] == ["first turn here", "fourth turn"]
  with pytest.raises(StageError, match="holds no turns"):
    empty = TurnDirectory(str(tmp_path / "empty"))
    empty.open(SETTINGS)
    on_policy_stages.turn_prompts(empty.root, 2, fits)
