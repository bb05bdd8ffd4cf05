"""Distilling a decoder-only draft from its target (specsample.train.distill_decoder), on a
tiny random target."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specsample import SamplingConfig, generate, load_model, speculative_generate
from specsample.checkpoints import save_hf_decoder_only
from specsample.models.decoder_only import DecoderOnly, DecoderOnlyConfig
from specsample.train import distill_decoder as dd

TARGET = DecoderOnlyConfig(
  vocab_size=96, d_model=32, num_heads=2, num_kv_heads=1, head_dim=16, mlp_dim=64,
  num_layers=3, tie_word_embeddings=True, eos_id=1, pad_id=0, rope_theta=1e4,
)  # fmt: skip
GREEDY = SamplingConfig(temperature=0.0)


@pytest.fixture(scope="module")
def target():
  return DecoderOnly.init_random(TARGET, seed=1)


@pytest.fixture(scope="module")
def prompts():
  rng = np.random.default_rng(0)
  return [rng.integers(2, TARGET.vocab_size, rng.integers(3, 9)).tolist() for _ in range(48)]


@pytest.fixture(scope="module")
def responses(target, prompts):
  return dd.generate_responses(target, prompts, max_new_tokens=12, k=4)


def test_responses_are_the_targets_greedy_outputs(target, prompts, responses):
  plain = generate(target, prompts[:8], max_new_tokens=12, sampling=GREEDY).sequences()
  assert [r.tokens for r in responses[:8]] == plain
  for r in responses:
    assert r.top_ids.shape == (len(r.tokens), 4) and r.top_ids[:, 0].tolist() == r.tokens
    assert np.all(np.diff(r.top_logprobs, axis=1) <= 0) and np.all(r.top_logprobs <= 0)


def test_responses_equal_a_reference_without_cache(target, prompts, responses):
  """Greedy tokens from one full forward pass per step (no cache, no decoding loop), and
  the top-k at every position of prompt + response from one forward of the whole sequence
  (the version of `generate_responses` with its own decoding loop matched it too)."""
  width = max(len(p) for p in prompts[:8]) + 12
  forward = jax.jit(DecoderOnly.forward)

  def logits(sequence):  # float32[width, vocab]; causal: the padding after is not seen
    row = np.zeros((1, width), np.int32)
    row[0, : len(sequence)] = sequence
    return np.asarray(forward(target, jnp.asarray(row))[0])

  for prompt, r in zip(prompts[:8], responses[:8]):
    sequence = list(prompt)
    while len(sequence) < len(prompt) + 12 and sequence[-1:] != [TARGET.eos_id]:
      sequence.append(int(np.argmax(logits(sequence)[len(sequence) - 1])))
    assert sequence == r.prompt + r.tokens
    log_probs = np.asarray(jax.nn.log_softmax(logits(sequence)))[: len(sequence) - 1]
    top_ids = np.argsort(-log_probs, axis=-1, kind="stable")[:, :4]
    np.testing.assert_array_equal(np.concatenate([r.prompt_top_ids, r.top_ids]), top_ids)
    expected = np.take_along_axis(log_probs, top_ids, axis=-1)
    got = np.concatenate([r.prompt_top_logprobs, r.top_logprobs])
    np.testing.assert_allclose(got, expected, atol=1e-4)


def test_sampled_responses_follow_the_seed(target, prompts):
  first = dd.generate_responses(target, prompts[:4], max_new_tokens=8, temperature=1.0, seed=5)
  again = dd.generate_responses(target, prompts[:4], max_new_tokens=8, temperature=1.0, seed=5)
  assert [r.tokens for r in first] == [r.tokens for r in again]


def test_chosen_output_ids_are_the_most_frequent_and_the_special_ones():
  ids, covered = dd.choose_output_ids([[5, 5, 5, 7, 7, 9], [5, 11]], 3, always=[1])
  assert ids.tolist() == [1, 5, 7] and covered == pytest.approx(6 / 8)
  ids, covered = dd.choose_output_ids([[4]], 3, always=[2])
  assert len(ids) == 3 and {2, 4} <= set(ids.tolist()) and covered == 1.0


def test_the_loss_is_masked_to_response_tokens(target, responses):
  ids, _ = dd.choose_output_ids([r.tokens for r in responses], 48, always=[1])
  table = dd.index_map(ids, TARGET.vocab_size)
  examples = responses[:4]
  batch = dd.make_batch(examples, table)
  for row, e in enumerate(examples):
    start = len(e.prompt) - 1
    assert not batch.mask[row, :start].any() and not batch.mask[row, start + len(e.tokens) :].any()
    kept = table[np.asarray(e.tokens)] >= 0
    assert batch.mask[row, start : start + len(e.tokens)].tolist() == kept.tolist()
  draft = dd.draft_from_target(target, [0], ids)
  value = dd.loss(draft.config, draft.params, jax.tree_util.tree_map(jnp.asarray, batch), 0.5)
  changed = batch.labels.copy()
  changed[batch.mask == 0] = 0  # labels outside the mask do not count
  other = dataclasses.replace(batch, labels=changed)
  same = dd.loss(draft.config, draft.params, jax.tree_util.tree_map(jnp.asarray, other), 0.5)
  assert float(value) == pytest.approx(float(same), rel=1e-6)
  flipped = batch.labels.copy()
  flipped[batch.mask == 1] = 0
  other = dataclasses.replace(batch, labels=flipped)
  moved = dd.loss(draft.config, draft.params, jax.tree_util.tree_map(jnp.asarray, other), 0.5)
  assert float(moved) != pytest.approx(float(value), rel=1e-3)


def test_distillation_raises_agreement_and_keeps_the_embedding(target, prompts, responses):
  ids, _ = dd.choose_output_ids([r.tokens for r in responses], 64, always=[1])
  config = TARGET.replace(num_layers=1, tie_word_embeddings=False, output_vocab_size=64)
  draft = DecoderOnly.init_random(config, seed=3)
  params = dict(draft.params, embed=target.params["embed"], output_ids=jnp.asarray(ids))
  draft = DecoderOnly(params=params, config=config)
  before = dd.agreement(draft, responses)
  table = dd.index_map(ids, TARGET.vocab_size)
  stream = dd.batches(responses, table, batch_size=16, seed=0)
  settings = dd.DistillSettings(steps=150, learning_rate=1e-2, warmup_steps=10, log_every=50)
  seen = []  # checkpoints get models whose arrays the next step has not donated yet

  def checkpoint(model, opt_state, step):
    seen.append((step, dd.agreement(model, responses[:2])["greedy"]))

  trained, _, log = dd.distill(
    draft, lambda: next(stream), settings, checkpoint=checkpoint, checkpoint_every=50
  )
  assert [step for step, _ in seen] == [50, 100, 150]
  after = dd.agreement(trained, responses)
  assert log[-1][1] < log[0][1]
  assert after["greedy"] > before["greedy"] + 0.2 and after["overlap"] > before["overlap"]
  assert np.array_equal(trained.params["embed"]["embedding"], target.params["embed"]["embedding"])
  assert trained.params["output_ids"].tolist() == ids.tolist()
  # A better draft: more tokens accepted per target call, and greedy output still exact.
  spec = [speculative_generate(target, d, prompts[:8], gamma=3, max_new_tokens=12,
                               sampling=GREEDY) for d in (draft, trained)]  # fmt: skip
  assert spec[1].stats.alpha > spec[0].stats.alpha
  assert spec[1].sequences() == [r.tokens for r in responses[:8]]


def test_batches_resumed_after_a_step_are_those_an_uninterrupted_run_reads(responses):
  ids, _ = dd.choose_output_ids([r.tokens for r in responses], 64, always=[1])
  table = dd.index_map(ids, TARGET.vocab_size)
  whole = dd.batches(responses, table, batch_size=8, seed=2, pool=2)
  first = [next(whole) for _ in range(15)]  # past one pass over the 48 responses (6 batches)
  resumed = dd.batches(responses, table, batch_size=8, seed=2, pool=2, start=9)
  for expected in first[9:]:
    got = next(resumed)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(expected), strict=True):
      np.testing.assert_array_equal(a, b)
  assert not np.array_equal(first[0].tokens, first[1].tokens)


def test_a_draft_from_the_targets_layers(target):
  ids = np.array([1, 4, 9, 20], np.int32)
  draft = dd.draft_from_target(target, [0, 2], ids)
  assert draft.config.num_layers == 2 and draft.config.output_vocab_size == 4
  assert np.array_equal(draft.params["blocks_1"]["up"]["kernel"],
                        target.params["blocks_2"]["up"]["kernel"])  # fmt: skip
  embedding = target.params["embed"]["embedding"]
  assert np.array_equal(draft.params["lm_head"]["kernel"], np.asarray(embedding)[ids].T)
  logits = draft.forward(jnp.array([[3, 5, 7]]))
  assert np.isneginf(np.asarray(logits[0, :, 2])).all() and np.isfinite(logits[0, :, 4]).all()
  assert dd.parameter_count(draft) < dd.parameter_count(draft, trainable_only=False)


def test_save_and_load_without_the_embedding(target, tmp_path):
  draft = dd.draft_from_target(target, [1], np.array([1, 2, 3, 5, 8], np.int32))
  save_hf_decoder_only(draft, tmp_path, include_embedding=False)
  embedding = target.params["embed"]["embedding"]
  loaded = load_model(tmp_path, shared_embedding=embedding)
  assert loaded.config.output_vocab_size == 5
  assert loaded.params["output_ids"].tolist() == [1, 2, 3, 5, 8]
  tokens = jnp.array([[4, 6, 2, 9]])
  np.testing.assert_allclose(loaded.forward(tokens), draft.forward(tokens), rtol=1e-6, atol=1e-6)
