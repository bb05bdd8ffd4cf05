"""Feature-level drafts (models.feature_draft, EAGLE-style): the model's cache, the
speculative loop's feature bookkeeping, exactness, checkpoints and training."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct
from tiny_models import FEATURE_TARGET, RAGGED
from toy_pairs import REPEATING_PROMPTS, assert_speculative_samples_fit

from specsample import SamplingConfig, generate, speculative_generate
from specsample.checkpoints.errors import CheckpointError
from specsample.checkpoints.feature_draft import (
  is_feature_draft_dir,
  load_feature_draft,
  save_feature_draft,
)
from specsample.checkpoints.formats.safetensors import read_safetensors, write_safetensors
from specsample.core.sampling import argmax_tokens, nonfinite_logits, top_probability
from specsample.models import DecoderOnly, MarkovLM, prefill
from specsample.models.lookup_draft import LookupThenModel
from specsample.models.toy import MarkovFeatureDraft
from specsample.train import distill_features as df
from specsample.train.optim import make_optimizer
from specsample.train.resume import load_training_state, save_training_state
from specsample.train.target_responses import generate_responses

GREEDY = SamplingConfig(temperature=0.0)


@pytest.fixture(scope="module")
def target():
  """Random weights, with EOS a token its greedy output reaches mid-way on a prompt."""
  model = DecoderOnly.init_random(FEATURE_TARGET, seed=1)
  row = generate(model, RAGGED[2:], max_new_tokens=8, sampling=GREEDY).sequences()[0]
  return model.replace(config=FEATURE_TARGET.replace(eos_id=row[5]))


@pytest.fixture(scope="module")
def draft(target):
  ids = np.arange(2, 66, dtype=np.int32)  # 64 kept tokens, EOS among them
  ids[0] = target.eos_id
  return df.draft_for_target(target, np.unique(ids), seed=3)


# ---------------------------------------------------------------- the model


def test_prefill_and_extends_equal_one_pass(draft):
  """init_state + extends (with the target's features) == forward over the whole text."""
  rng = np.random.default_rng(0)
  tokens = jnp.asarray(rng.integers(2, 96, (2, 12)), jnp.int32)
  features = jnp.asarray(rng.normal(size=(2, 12, 32)), jnp.float32)
  full_logits, full_outputs = draft.forward(tokens, features)
  lengths = jnp.asarray([5, 5], jnp.int32)
  state, pending = draft.init_state(tokens[:, :5], lengths, 16, features=features[:, :5])
  assert pending.tolist() == tokens[:, 4].tolist()
  # The pending token 4 with feature 3, then tokens 5..8 with features 4..7, then 9..11.
  for start, stop in ((4, 5), (5, 9), (9, 12)):
    k = stop - start
    logits, state = draft.extend(
      state,
      tokens[:, start:stop],
      jnp.full((2,), k, jnp.int32),
      features=features[:, start - 1 : stop - 1],
    )
    kept = draft.params["output_ids"]
    np.testing.assert_allclose(
      logits[..., kept], full_logits[:, start:stop][..., kept], rtol=1e-5, atol=1e-5
    )
  np.testing.assert_allclose(state.last_feature, full_outputs[:, 11], rtol=1e-5, atol=1e-5)
  assert np.all(np.isneginf(np.delete(np.asarray(logits), np.asarray(kept), axis=-1)))


def test_a_padded_prompt_array_is_prefilled_in_passes(target, draft):
  """Prompts padded to 200 positions, the longest holding 120, `padded_prefill` on: the
  draft's prefill in two passes of PREFILL_CHUNK writes what one pass writes, and a
  feature pair's greedy output on them equals the target's (both prefill in passes), alone
  and behind prompt lookup."""
  rng = np.random.default_rng(5)
  tokens = jnp.asarray(rng.integers(2, 96, (2, 200)), jnp.int32)
  features = jnp.asarray(rng.normal(size=(2, 200, 32)), jnp.float32)
  lengths = jnp.asarray([120, 40], jnp.int32)
  padded = prefill.for_padded_prompts(draft)
  states = [
    jax.jit(lambda p, n, f, m=m: m.init_state(p, n, 4, features=f))(tokens, lengths, features)[0]
    for m in (padded, draft)
  ]
  for a, b in zip(jax.tree.leaves(states[0].caches), jax.tree.leaves(states[1].caches)):
    np.testing.assert_allclose(np.asarray(a)[:, :128], np.asarray(b)[:, :128], atol=1e-5)
    assert not np.asarray(a)[:, 128:].any()  # never written
  target = prefill.for_padded_prompts(target)
  plain = generate(target, tokens, prompt_lengths=lengths, max_new_tokens=10, sampling=GREEDY)
  behind_lookup = prefill.for_padded_prompts(LookupThenModel.for_target(draft, target))
  assert behind_lookup.model.padded_prefill
  for candidate in (padded, behind_lookup):
    spec = speculative_generate(target, candidate, tokens, prompt_lengths=lengths, gamma=3,
                                max_new_tokens=10, sampling=GREEDY)  # fmt: skip
    assert spec.sequences() == plain.sequences()


def test_a_drafting_step_pairs_the_token_with_the_drafts_own_last_output(draft):
  rng = np.random.default_rng(1)
  tokens = jnp.asarray(rng.integers(2, 96, (2, 6)), jnp.int32)
  features = jnp.asarray(rng.normal(size=(2, 6, 32)), jnp.float32)
  state, _ = draft.init_state(tokens, jnp.asarray([6, 4], jnp.int32), 8, features=features)
  _, state = draft.extend(
    state, tokens[:, :2], jnp.asarray([2, 1], jnp.int32), features=features[:, :2]
  )
  step = jnp.asarray([[7], [9]], jnp.int32)
  implicit, _ = draft.extend(state, step, jnp.ones((2,), jnp.int32))
  explicit, _ = draft.extend(
    state, step, jnp.ones((2,), jnp.int32), features=state.last_feature[:, None]
  )
  np.testing.assert_array_equal(implicit, explicit)


def test_bad_calls_are_refused(draft):
  tokens = jnp.ones((1, 4), jnp.int32)
  with pytest.raises(ValueError, match="features must be"):
    draft.init_state(tokens, jnp.asarray([4]), 4, features=jnp.zeros((1, 4, 31)))
  state, _ = draft.init_state(tokens, jnp.asarray([4]), 4)
  with pytest.raises(ValueError, match="one token per row"):
    draft.extend(state, tokens[:, :2], jnp.asarray([2]))


def test_greedy_calls_give_the_argmax_of_the_whole_vocabularys_logits(target, draft):
  """`extend_greedy` (the reduced vocabulary's logits alone) == the argmax, unusable
  flags and top probability of `extend`'s logits, with the same state: for the draft,
  for one whose kept tokens all tie (the lowest id wins), one whose logits are NaN, and
  behind lookup (with and without its doubt rule)."""
  embedding = draft.params["output_embedding"]  # [64, d]
  tied = draft.replace(
    params={**draft.params, "output_embedding": jnp.broadcast_to(embedding[3], embedding.shape)}
  )
  fuse = draft.params["fuse"]
  nan = draft.replace(
    params={**draft.params, "fuse": {**fuse, "bias": fuse["bias"].at[0].set(jnp.nan)}}
  )
  rng = np.random.default_rng(2)
  tokens = jnp.asarray(rng.integers(2, 96, (2, 9)), jnp.int32)
  features = jnp.asarray(rng.normal(size=(2, 9, 32)), jnp.float32)
  lengths = jnp.asarray([9, 6], jnp.int32)
  calls = (  # a catch-up with the target's features, then a drafting step
    (tokens[:, 4:7], jnp.asarray([3, 2], jnp.int32), {"features": features[:, 3:6]}),
    (jnp.asarray([[9], [4]], jnp.int32), jnp.ones((2,), jnp.int32), {}),
  )
  greedy = {}
  behind = {f"lookup, doubt {d}": LookupThenModel.for_target(draft, target, doubt=d)
            for d in (0.0, 0.25, 1.0)}  # fmt: skip
  for name, model in [("draft", draft), ("tied", tied), ("nan", nan), *behind.items()]:
    state, _ = model.init_state(tokens, lengths, 8, features=features)
    for step, num_valid, extra in calls:
      logits, expected_state = model.extend(state, step, num_valid, **extra)
      (best, bad, top), state = model.extend_greedy(state, step, num_valid, **extra)
      np.testing.assert_array_equal(bad, nonfinite_logits(logits))
      np.testing.assert_array_equal(  # any token where the logits are unusable
        np.where(bad, 0, best), np.where(bad, 0, argmax_tokens(logits))
      )
      np.testing.assert_allclose(  # over the kept tokens against the whole vocabulary
        np.where(bad, 1, top), np.where(bad, 1, top_probability(logits)), rtol=1e-6
      )
      jax.tree.map(np.testing.assert_array_equal, state, expected_state)
      greedy.setdefault(name, []).append((best, bad))
  assert all(np.all(best == draft.params["output_ids"][0]) for best, _ in greedy["tied"])
  assert all(np.all(bad) for _, bad in greedy["nan"])
  assert not any(np.any(bad) for _, bad in greedy["draft"])


# ---------------------------------------------------------------- the loop


@pytest.mark.parametrize("gamma", [1, 3, 6])
def test_a_perfect_feature_draft_is_always_accepted(gamma):
  """MarkovFeatureDraft with the target's own table proposes exactly the target's
  distribution only if every token is paired with the feature of the position before it
  (through prefill, catch-up over x_1..x_n, y, and drafting steps): alpha must be 1."""
  target = MarkovLM.random(0, 8, order=2, eos_id=1, scale=3.0)
  perfect = MarkovFeatureDraft(target.logits_table)
  plain = generate(target, RAGGED, max_new_tokens=24, sampling=GREEDY)
  spec = speculative_generate(target, perfect, RAGGED, gamma=gamma, max_new_tokens=24,
                              sampling=GREEDY)  # fmt: skip
  assert spec.sequences() == plain.sequences()
  assert spec.stats.alpha == 1.0
  for rule in ("token", "block"):
    sampled = speculative_generate(
      target, perfect, RAGGED * 4, gamma=gamma, max_new_tokens=24,
      sampling=SamplingConfig(temperature=1.0), verification=rule, seed=gamma,
    )  # fmt: skip
    assert sampled.stats.alpha == 1.0


def test_a_wrongly_paired_draft_is_not_always_accepted():
  """The check above can fail: the perfect draft paired with the feature of its own
  position (one off) is rejected often."""

  @struct.dataclass
  class OffByOne(MarkovFeatureDraft):
    def extend(self, state, tokens, num_valid, features=None):
      if features is not None:
        features = jax.nn.one_hot(tokens, self.vocab_size)
      return super().extend(state, tokens, num_valid, features)

  target = MarkovLM.random(0, 8, order=2, eos_id=1, scale=3.0)
  spec = speculative_generate(target, OffByOne(target.logits_table), RAGGED, gamma=3,
                              max_new_tokens=24, sampling=GREEDY)  # fmt: skip
  assert spec.stats.alpha < 0.9


ROWS_PER_PROMPT = 6000


@pytest.mark.slow
@pytest.mark.parametrize(
  "rule,gamma,lookup,adaptive",
  [("token", 3, False, False), ("block", 4, True, False), ("token", 4, False, True)],
)
def test_sequences_follow_the_exact_target_distribution(rule, gamma, lookup, adaptive):
  """A noisy feature draft (alone, or behind prompt lookup; fixed or adaptive length),
  batch > 1."""
  target = MarkovLM.random(7, 5, order=2, scale=2.0)
  noise = jax.random.normal(jax.random.key(9), target.logits_table.shape)
  draft = MarkovFeatureDraft(target.logits_table + 1.5 * noise)
  if lookup:
    draft = LookupThenModel.for_target(draft, target, trust_ngram=2)
  out = assert_speculative_samples_fit(
    target, draft, SamplingConfig(temperature=1.0), ROWS_PER_PROMPT, REPEATING_PROMPTS,
    gamma=gamma, max_new_tokens=4, verification=rule, seed=17, adaptive=adaptive,
  )  # fmt: skip
  assert 0.2 < out.stats.alpha < 0.95
  drafted, iterations = np.asarray(out.stats.drafted), np.asarray(out.stats.iterations)
  assert (drafted.sum() < gamma * iterations.sum()) == adaptive  # rows stopped early


def test_greedy_output_equals_the_targets_with_a_decoder_only_pair(target, draft):
  """Random weights: EOS inside blocks, ragged prompts, alone and behind lookup, chains of
  fixed and adaptive length."""
  plain = generate(target, RAGGED, max_new_tokens=20, sampling=GREEDY)
  assert any(target.eos_id in row for row in plain.sequences())  # EOS ends some row
  for candidate in (draft, LookupThenModel.for_target(draft, target)):
    for gamma, adaptive in ((1, False), (4, False), (4, True)):
      spec = speculative_generate(target, candidate, RAGGED, gamma=gamma, max_new_tokens=20,
                                  sampling=GREEDY, adaptive=adaptive)  # fmt: skip
      assert spec.sequences() == plain.sequences(), (gamma, adaptive)


def test_feature_pairs_are_checked(target, draft):
  with pytest.raises(ValueError, match="gives none"):
    speculative_generate(_without_features(target), draft, [[2, 3]], max_new_tokens=4)
  wide = MarkovFeatureDraft(jnp.zeros((96, 96, 96)))  # features of width 96, not 32
  with pytest.raises(ValueError, match="width"):
    speculative_generate(target, wide, [[2, 3]], max_new_tokens=4)
  with pytest.raises(ValueError, match="tree"):
    speculative_generate(target, draft, [[2, 3]], max_new_tokens=4, tree=2)


def _without_features(model):
  """`model` behind the plain contract only (no feature members)."""

  @struct.dataclass
  class Plain:
    inner: object

    vocab_size = property(lambda self: self.inner.vocab_size)
    eos_id = property(lambda self: self.inner.eos_id)
    pad_id = property(lambda self: self.inner.pad_id)

    def init_state(self, *args):
      return self.inner.init_state(*args)

    def extend(self, *args):
      return self.inner.extend(*args)

    def rewind(self, *args):
      return self.inner.rewind(*args)

  return Plain(model)


# ---------------------------------------------------------------- checkpoints and training


def test_saved_drafts_load_with_their_target(target, draft, tmp_path):
  save_feature_draft(draft, tmp_path / "draft", dtype="float32")
  assert is_feature_draft_dir(tmp_path / "draft") and not is_feature_draft_dir(tmp_path)
  loaded = load_feature_draft(tmp_path / "draft", target)
  tokens = jnp.asarray([[2, 5, 7, 9]], jnp.int32)
  features = jax.random.normal(jax.random.key(0), (1, 4, 32))
  np.testing.assert_array_equal(
    loaded.forward(tokens, features)[0], draft.forward(tokens, features)[0]
  )
  other = DecoderOnly.init_random(FEATURE_TARGET.replace(d_model=48, head_dim=12), seed=0)
  with pytest.raises(CheckpointError, match="width"):
    load_feature_draft(tmp_path / "draft", other)
  with pytest.raises(ValueError, match="block_format must be one of"):
    load_feature_draft(tmp_path / "draft", target, block_format="q6_k")


def test_a_draft_whose_output_ids_are_not_increasing_is_refused(target, draft, tmp_path):
  save_feature_draft(draft, tmp_path / "draft", dtype="float32")
  path = tmp_path / "draft" / "model.safetensors"
  tensors = read_safetensors(path)
  tensors["output_ids"] = tensors["output_ids"][::-1].copy()  # ties would break otherwise
  write_safetensors(tensors, path)
  with pytest.raises(CheckpointError, match="increasing"):
    load_feature_draft(tmp_path / "draft", target)


def test_responses_keep_the_targets_features(target):
  responses = generate_responses(target, RAGGED, max_new_tokens=8, features=True)
  plain = generate(target, RAGGED, max_new_tokens=8, sampling=GREEDY).sequences()
  assert [r.tokens for r in responses] == plain
  assert len(responses[2].tokens) < 8 and responses[2].tokens[-1] == target.eos_id  # EOS kept
  for response in responses:
    sequence = jnp.asarray([response.prompt + response.tokens], jnp.int32)
    length = jnp.asarray([sequence.shape[1]], jnp.int32)
    _, _, features = target.init_state_with_features(sequence, length, 0)  # a prefill
    assert response.features.shape == (sequence.shape[1] - 1, 32)
    assert response.features.dtype == np.float16
    np.testing.assert_allclose(response.features, features[0, :-1], rtol=2e-3, atol=2e-3)


def test_features_alone_equal_the_features_read_with_top_k(target):
  """k = 0 reads the features without the output layer: the same features and tokens."""
  full = generate_responses(target, RAGGED, max_new_tokens=8, features=True)
  alone = generate_responses(target, RAGGED, max_new_tokens=8, features=True, k=0)
  for a, b in zip(alone, full, strict=True):
    assert a.tokens == b.tokens and a.prompt == b.prompt
    assert a.top_ids is None and a.prompt_top_logprobs is None
    np.testing.assert_array_equal(a.features, b.features)
  with pytest.raises(ValueError, match="features=True"):
    generate_responses(target, RAGGED, max_new_tokens=8, k=0)


def _greedy_sequences(responses, *, features: bool = True) -> list[df.FeatureSequence]:
  """Greedy responses as training sequences (with their features, or None: to be read)."""
  return [
    df.FeatureSequence(
      tokens=np.asarray(r.prompt + r.tokens, np.int32),
      features=r.features if features else None,
      prompt_length=len(r.prompt),
      task="chat",
      temperature=0.0,
      index=i,
    )  # fmt: skip
    for i, r in enumerate(responses)
  ]


def test_training_brings_the_draft_closer_to_the_target(target, draft, tmp_path):
  rng = np.random.default_rng(0)
  prompts = [rng.integers(2, 96, rng.integers(3, 9)).tolist() for _ in range(24)]
  responses = generate_responses(target, prompts, max_new_tokens=16, features=True)
  sequences = _greedy_sequences(responses)
  before = df.agreement(draft, sequences)
  stream = df.batches(sequences, 256, seed=0, bucket=32)
  settings = df.FeatureDistillSettings(steps=60, learning_rate=3e-3, warmup_steps=5, log_every=20)
  trained, _, log = df.train(draft, lambda: next(stream), settings)
  after = df.agreement(trained, sequences)
  assert log[-1][1] < 0.9 * log[0][1]  # mean losses of steps 1-20 and 41-60
  assert after["greedy"] > before["greedy"] + 0.2  # ~0.02 -> ~0.3 on these sequences
  frozen = ("embed", "output_embedding", "output_ids")
  for name in frozen:
    np.testing.assert_array_equal(
      jax.tree.leaves(trained.params[name]), jax.tree.leaves(draft.params[name])
    )


def test_agreement_scores_sampled_responses_against_the_targets_greedy_tokens(target, draft):
  """A sampled response's next tokens are not the target's argmax: without the target's
  greedy tokens read for it, it is left out; with them, it is scored against those."""
  from specsample.train.store_features import LiveFeatures

  responses = generate_responses(target, RAGGED, max_new_tokens=8, features=True)
  greedy = _greedy_sequences(responses, features=False)
  read = LiveFeatures(target)(greedy, target_next=True)
  for s in read:  # a greedy response's next tokens are the target's argmax
    np.testing.assert_array_equal(s.target_next[s.prompt_length - 1 :], s.tokens[s.prompt_length :])
  scored = df.agreement(draft, LiveFeatures(target)(greedy), steps=2)
  assert scored["tokens"] == sum(len(r.tokens) for r in responses)
  sampled = [dataclasses.replace(s, temperature=1.0) for s in read]
  assert df.agreement(draft, [dataclasses.replace(s, target_next=None) for s in sampled]) == {
    "greedy": 0.0, "tokens": 0,
  }  # fmt: skip
  assert df.agreement(draft, sampled, steps=2) == scored
  assert scored["greedy"] > 0
  # scored against target_next, not the response's own tokens
  never = [dataclasses.replace(s, target_next=np.full_like(s.target_next, -2)) for s in sampled]
  assert df.agreement(draft, never) == {"greedy": 0.0, "tokens": scored["tokens"]}
  # a whole block agrees no more often than its first step; its first step is that step
  chain = scored["chain_by_step"]
  assert chain[0] == scored["by_step"][0] and chain[1] <= min(chain[0], scored["by_step"][1])


def test_a_block_agrees_where_every_step_up_to_it_agrees_on_its_own_position():
  agree = np.array([[1, 1, 0, 1], [1, 1, 1, 1], [0, 1, 1, 1]], bool)  # [step, position]
  np.testing.assert_array_equal(
    df.chain_agreement(agree), [[1, 1, 0, 1], [1, 1, 0, 0], [1, 1, 0, 0]]
  )


def test_a_run_resumed_from_its_checkpoint_equals_one_uninterrupted_run(target, draft, tmp_path):
  rng = np.random.default_rng(1)
  prompts = [rng.integers(2, 96, rng.integers(3, 9)).tolist() for _ in range(12)]
  responses = generate_responses(target, prompts, max_new_tokens=12, features=True, k=0)
  sequences = [
    df.FeatureSequence(tokens=np.asarray(r.prompt + r.tokens, np.int32), features=r.features,
                       prompt_length=len(r.prompt), task="chat", temperature=0.0, index=i)
    for i, r in enumerate(responses)
  ]  # fmt: skip
  settings = df.FeatureDistillSettings(steps=6, learning_rate=3e-3, warmup_steps=2, log_every=1,
                                       steps_ahead=2, noise=0.2, seed=4)  # fmt: skip
  path = str(tmp_path / "checkpoint.npz")

  def save_at_three(model, opt_state, step):
    if step == 3:
      save_training_state(path, df.split_frozen(model.params)[0], opt_state, step)

  stream = df.batches(sequences, 128, seed=4, bucket=32)
  whole, _, whole_log = df.train(draft, lambda: next(stream), settings, checkpoint=save_at_three,
                                 checkpoint_every=1)  # fmt: skip
  trainable, frozen = df.split_frozen(draft.params)
  template = make_optimizer(settings).init(trainable)
  trainable, opt_state, start = load_training_state(path, trainable, template)
  assert start == 3
  resumed_draft = draft.replace(params={**trainable, **frozen})
  stream = df.batches(sequences, 128, seed=4, bucket=32, start=start)
  resumed, _, resumed_log = df.train(resumed_draft, lambda: next(stream), settings,
                                     opt_state=opt_state, start_step=start)  # fmt: skip
  assert resumed_log == whole_log[3:]
  for a, b in zip(jax.tree.leaves(resumed.params), jax.tree.leaves(whole.params), strict=True):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  moved = jax.tree.leaves(df.split_frozen(whole.params)[0])[0]
  assert not np.array_equal(moved, jax.tree.leaves(df.split_frozen(draft.params)[0])[0])


# ---------------------------------------------------------------- the bench


def test_bench_measures_a_feature_pair():
  """Analytic alpha along the target's outputs reads the target's features (a perfect
  feature draft: 1 exactly), and the whole bench runs: sweep, batches, phases."""
  from specsample.bench.pair import alpha_along_target_outputs, bench_pair
  from specsample.bench.pair_report import BenchSettings

  target = MarkovLM.random(0, 7, order=2, scale=2.0, eos_id=6)
  perfect = MarkovFeatureDraft(target.logits_table, eos_id=6)
  prompts = [[1, 2], [3], [4, 5, 1], [2]]
  for temperature in (0.0, 1.0):
    sampling = SamplingConfig(temperature=temperature)
    out = generate(target, prompts, max_new_tokens=6, sampling=sampling, seed=3)
    sequences, lengths = np.asarray(out.tokens), np.asarray(out.lengths)
    alpha = alpha_along_target_outputs(target, perfect, prompts, sequences, lengths, sampling)
    assert alpha == pytest.approx(1.0, abs=1e-6)
  noisy = MarkovFeatureDraft(target.logits_table + jax.random.normal(jax.random.key(1), (7,) * 3))
  settings = BenchSettings(gammas=(2, 3), batch_sizes=(1, 2), max_new_tokens=8, repeats=1,
                           cost_repeats=2)  # fmt: skip
  report = bench_pair(target, noisy, prompts, settings)
  assert 0.2 < report.analytic_alpha[0.0] < 1
  for phases in report.phases:
    assert phases.iterations == report.best(phases.temperature).target_calls
    assert min(phases.prefill_seconds, phases.model_calls_seconds) > 0


@pytest.mark.parametrize("feature", [False, True])
def test_the_phase_breakdowns_calls_only_loop_replays_the_real_loop(feature):
  """bench.phases times the loop's model calls by replaying a real run's accepted counts
  through the loop's own drafter: it makes as many batched draft calls as the real run
  (catch-ups included) and leaves the target's cache where the real commits put it."""
  import dataclasses

  from specsample.bench.phases import speculative_model_calls
  from specsample.decoding import SpeculativeSettings, speculative_decode

  target = MarkovLM.random(7, 6, order=2, scale=2.0)
  noise = jax.random.normal(jax.random.key(9), target.logits_table.shape)
  table = target.logits_table + noise
  draft = MarkovFeatureDraft(table) if feature else MarkovLM(table)
  prompt = jnp.asarray([[1, 2, 3]], jnp.int32)
  length = jnp.asarray([3], jnp.int32)
  settings = SpeculativeSettings.of(gamma=3, max_new_tokens=12, sampling=GREEDY)
  traced = dataclasses.replace(settings, record_trace=True)
  real = speculative_decode(target, draft, prompt, traced, prompt_lengths=length)
  iterations = int(real.stats.target_calls)
  accepted = real.trace.accepted
  _, draft_calls, target_end = speculative_model_calls(
    target, draft, prompt, length, accepted, iterations, settings=settings, with_draft=True
  )
  assert int(draft_calls) == int(real.stats.draft_calls)
  committed = int(np.sum(np.asarray(accepted)[:iterations] + 1))
  assert int(target_end[0]) == 3 - 1 + committed  # all committed tokens but the last
  _, no_draft_calls, alone_end = speculative_model_calls(
    target, draft, prompt, length, accepted, iterations, settings=settings, with_draft=False
  )
  assert int(no_draft_calls) == 0 and int(alone_end[0]) == int(target_end[0])


@pytest.mark.parametrize("depth", [1, 2])
def test_training_time_test_runs_the_draft_as_a_drafted_block_does(draft, depth):
  """Step `depth` + 1 of a block in training (`predict_steps` with the step mask) gives the
  logits the model gives in the loop: a catch-up over the target's features, then depth
  drafting steps on its own outputs."""
  rng = np.random.default_rng(2)
  tokens = jnp.asarray(rng.integers(2, 96, (1, 10)), jnp.int32)
  features = jnp.asarray(rng.normal(size=(1, 10, 32)), jnp.float32)
  outputs = df.predict_steps(draft.config, draft.params, tokens, df.previous_features(features), 3)
  kept = draft.params["output_ids"]
  for j in (depth + 2, 9):
    start = j - depth  # the catch-up's token: the last one read with the target's feature
    prefix = start + 1  # init_state consumes all but its last token, which is pending
    state, _ = draft.init_state(
      tokens[:, :prefix], jnp.asarray([prefix]), 8, features=features[:, :prefix]
    )
    one = jnp.ones((1,), jnp.int32)
    logits, state = draft.extend(
      state, tokens[:, start : start + 1], one, features=features[:, start - 1 : start]
    )
    for step in range(1, depth + 1):
      logits, state = draft.extend(state, tokens[:, start + step : start + step + 1], one)
    np.testing.assert_allclose(logits[0, 0, kept], outputs[depth][1][0, j], rtol=1e-4, atol=1e-4)
