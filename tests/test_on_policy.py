"""The committed store of on-policy responses and its resumable, fixed-shape generation."""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest
from tiny_models import FEATURE_TARGET

from specsample import SamplingConfig, generate
from specsample.data.chat_prompts import ChatPrompt
from specsample.decoding import autoregressive
from specsample.models.decoder_only import DecoderOnly
from specsample.train import distill_features as df
from specsample.train import on_policy, store_features
from specsample.train.response_store import (
  ResponseStore,
  Shard,
  StoredResponse,
  StoreError,
  StoreSettings,
  read_responses,
)
from specsample.train.target_responses import read_sequences

TARGET = FEATURE_TARGET.replace(num_heads=2, num_kv_heads=1, head_dim=16)
SETTINGS = StoreSettings(
  target="toy", target_bytes=1, activations="float32", max_new_tokens=10, batch_size=4,
  widths=(8, 16), sampled_every=3, seed=5,
)  # fmt: skip


@pytest.fixture(scope="module")
def target():
  return DecoderOnly.init_random(TARGET, seed=1)


def encode(text: str) -> list[int]:
  """A toy tokenizer: one id per character (2..95)."""
  return [2 + ord(c) % 94 for c in text]


PROMPTS = [
  ChatPrompt("chat", "".join(chr(97 + (i * 7 + j) % 26) for j in range(3 + i % 13)), f"s:{i}")
  for i in range(22)
] + [ChatPrompt("chat", "x" * 20, "s:long")]  # longer than every width: left out


def new_store(path) -> ResponseStore:
  store = ResponseStore(str(path))
  store.open(SETTINGS)
  store.write_prompts(PROMPTS)
  return store


def test_the_plan_has_one_shape_per_width_and_covers_every_prompt_that_fits():
  encoded = [encode(p.prompt) for p in PROMPTS]
  batches = on_policy.plan_batches(encoded, SETTINGS)
  planned = sorted(i for b in batches for i, _ in b.rows)
  assert planned == list(range(22))  # the 20-token prompt is longer than 16
  for batch in batches:
    assert 1 <= len(batch.rows) <= SETTINGS.batch_size
    assert all(len(ids) <= batch.width for _, ids in batch.rows)
    widths = [on_policy.width_of(len(ids), SETTINGS.widths) for _, ids in batch.rows]
    assert batch.width == max(widths)
    sampled = {on_policy.temperature_of(i, SETTINGS) for i, _ in batch.rows}
    assert sampled == {batch.temperature}
  assert {i for b in batches if b.temperature == 1.0 for i, _ in b.rows} == set(range(0, 22, 3))
  assert len({b.batch_id for b in batches}) == len(batches)
  assert on_policy.plan_batches(encoded, SETTINGS) == batches  # deterministic


def test_generation_compiles_once_per_width_and_temperature(target, tmp_path):
  store = new_store(tmp_path / "store")
  encoded = [encode(p.prompt) for p in PROMPTS]
  autoregressive.generate_program.clear_cache()
  report = on_policy.generate_into(target, store, encoded, minutes=10)
  batches = on_policy.plan_batches(encoded, SETTINGS)
  shapes = {(b.temperature, b.width) for b in batches}
  assert report.batches_run == len(batches) > len(shapes)
  assert autoregressive.generate_program._cache_size() == len(shapes)
  assert report.batches_left == 0


def test_stored_responses_are_the_targets_own(target, tmp_path):
  store = new_store(tmp_path / "store")
  encoded = [encode(p.prompt) for p in PROMPTS]
  on_policy.generate_into(target, store, encoded, minutes=10)
  sequences = read_responses(store, encode)
  assert sorted(s.index for s in sequences) == list(range(22))
  for s in sequences:
    assert s.prompt.tolist() == encoded[s.index]
    assert s.temperature == on_policy.temperature_of(s.index, SETTINGS)
    if s.temperature == 0.0:  # greedy: what plain decoding of the prompt alone gives
      alone = generate(target, [s.prompt.tolist()], max_new_tokens=SETTINGS.max_new_tokens,
                       sampling=SamplingConfig(temperature=0.0))  # fmt: skip
      expected = np.asarray(alone.tokens)[0, : int(alone.lengths[0])]
      np.testing.assert_array_equal(s.response, expected)
    assert 1 <= len(s.response) <= SETTINGS.max_new_tokens
    assert (s.response[:-1] != TARGET.eos_id).all()  # a response ends at its first EOS


def test_a_run_cut_in_two_resumes_to_what_one_run_stores(target, tmp_path):
  encoded = [encode(p.prompt) for p in PROMPTS]
  whole = new_store(tmp_path / "whole")
  on_policy.generate_into(target, whole, encoded, minutes=10)
  parts = new_store(tmp_path / "parts")
  first = on_policy.generate_into(target, parts, encoded, minutes=10, max_batches=2,
                                  shard_minutes=0)  # fmt: skip
  assert first.batches_run == 2 and first.batches_left > 0
  assert len(parts.shard_paths()) == 2  # a shard per batch
  second = on_policy.generate_into(target, parts, encoded, minutes=10)
  assert second.batches_done == 2 and second.batches_left == 0
  assert len(parts.shard_paths()) == 3
  assert on_policy.generate_into(target, parts, encoded, minutes=10).batches_run == 0

  def by_index(store):
    return {s.index: s.response.tolist() for s in read_responses(store, encode)}

  assert by_index(parts) == by_index(whole)  # sampled rows included: keys follow batch ids


def test_a_store_refuses_other_settings_and_a_changed_tokenizer(target, tmp_path):
  store = new_store(tmp_path / "store")
  with pytest.raises(StoreError, match="max_new_tokens: kept 10, asked 12"):
    ResponseStore(store.root).open(dataclasses.replace(SETTINGS, max_new_tokens=12))
  with pytest.raises(StoreError, match="written once"):
    store.write_prompts(PROMPTS)
  encoded = [encode(p.prompt) for p in PROMPTS]
  on_policy.generate_into(target, store, encoded, minutes=10)
  with pytest.raises(StoreError, match="the tokenizer changed"):
    read_responses(store, lambda text: encode(text) + [2])


def test_shards_keep_token_ids_compressed_and_whole(tmp_path):
  store = new_store(tmp_path / "store")
  tokens = np.tile(np.arange(0, 60000, 3000, dtype=np.int32), 500)  # text repeats itself
  store.append(Shard(("a", "b"), (StoredResponse(3, 0.0, 5, tokens),
                                  StoredResponse(4, 1.0, 6, tokens[:3])), 2.5))  # fmt: skip
  (shard,) = store.shards()
  assert shard.batch_ids == ("a", "b") and shard.seconds == 2.5
  np.testing.assert_array_equal(shard.responses[0].tokens, tokens)
  assert [r.index for r in shard.responses] == [3, 4]
  assert store.done_batches() == {"a", "b"}
  assert os.path.getsize(store.shard_paths()[0]) < tokens.size // 2  # compressed uint16
  with pytest.raises(StoreError, match="uint16"):
    store.append(Shard(("c",), (StoredResponse(0, 0.0, 1, np.asarray([70000])),), 1.0))
  assert store.summary()["response_tokens"] == tokens.size + 3


def test_features_are_recomputed_from_the_stored_ids_and_resume_by_shard(target, tmp_path):
  store = new_store(tmp_path / "store")
  encoded = [encode(p.prompt) for p in PROMPTS]
  on_policy.generate_into(target, store, encoded, minutes=10, max_batches=2, shard_minutes=0)
  directory = str(tmp_path / "features")
  written, positions, _ = store_features.features_into(target, store, encode, directory,
                                                       minutes=10)  # fmt: skip
  assert written == 2
  sequences = df.read_shards(directory)
  stored = read_responses(store, encode)
  assert [s.index for s in sequences] == [s.index for s in stored]
  assert positions == sum(len(s.features) for s in sequences)
  assert all(isinstance(s.features, np.memmap) for s in sequences)  # mapped, not read
  for s, r in zip(sequences, stored, strict=True):
    full = np.concatenate([r.prompt, r.response])
    np.testing.assert_array_equal(s.tokens, full)
    assert s.prompt_length == len(r.prompt) and s.temperature == r.temperature
    _, _, alone = read_sequences(target, [full.tolist()], k=0)  # the sequence read alone
    np.testing.assert_allclose(s.features, alone[0, : len(full) - 1], rtol=2e-3, atol=2e-3)
  on_policy.generate_into(target, store, encoded, minutes=10)  # the rest of the plan
  again, _, _ = store_features.features_into(target, store, encode, directory, minutes=10)
  assert again == len(store.shard_paths()) - 2  # only the new store shards
