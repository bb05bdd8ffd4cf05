"""The decoder-only model: cache semantics of the contract and exact speculative decoding."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specsample import SamplingConfig, generate, speculative_generate
from specsample.models import DecoderOnly, DecoderOnlyConfig, prefill
from specsample.models.decoder_only import preset, rotary

TINY = DecoderOnlyConfig(
  vocab_size=50, d_model=32, num_heads=4, num_kv_heads=2, head_dim=8, mlp_dim=48,
  num_layers=2, eos_id=1,
)  # fmt: skip


def full_logits(model: DecoderOnly, tokens: np.ndarray) -> jax.Array:
  """Logits at every position of tokens [1, n] from ONE extend after a 1-token prompt."""
  state, pending = model.init_state(jnp.asarray(tokens[:, :1]), jnp.array([1]), tokens.shape[1])
  inputs = jnp.asarray(tokens)
  assert int(pending[0]) == tokens[0, 0]
  return model.extend(state, inputs, jnp.array([tokens.shape[1]]))[0]


def test_parameter_count_matches_the_config():
  for config in (TINY, DecoderOnlyConfig(vocab_size=50, d_model=16, num_heads=2, num_kv_heads=1,
                                          head_dim=8, mlp_dim=24, num_layers=1,
                                          tie_word_embeddings=True)):  # fmt: skip
    model = DecoderOnly.init_random(config)
    assert sum(x.size for x in jax.tree_util.tree_leaves(model.params)) == config.num_parameters
  assert 130e6 < preset("llama-134m").num_parameters < 140e6


def test_one_multi_token_call_equals_token_by_token_decoding():
  model = DecoderOnly.init_random(TINY, seed=0)
  tokens = np.array([[5, 9, 3, 7, 7, 2, 11, 4]])
  reference = full_logits(model, tokens)  # [1, 8, vocab]
  state, _ = model.init_state(jnp.asarray(tokens[:, :1]), jnp.array([1]), 8)
  for i in range(tokens.shape[1]):
    logits, state = model.extend(state, jnp.asarray(tokens[:, i : i + 1]), jnp.array([1]))
    np.testing.assert_allclose(logits[:, 0], reference[:, i], atol=1e-5)


def test_prefill_of_ragged_prompts_and_rewind():
  model = DecoderOnly.init_random(TINY, seed=1)
  sequence = np.array([[5, 9, 3, 7, 7, 2, 11, 4]])
  reference = full_logits(model, sequence)
  # Row 0: prompt of 5 tokens; row 1: the same 3 tokens, right-padded.
  prompts = jnp.array([[5, 9, 3, 7, 7], [5, 9, 3, 0, 0]])
  state, pending = model.init_state(prompts, jnp.array([5, 3]), 6)
  assert pending.tolist() == [7, 3] and state.end_index.tolist() == [4, 2]
  logits, state = model.extend(state, jnp.array([[7, 2, 11], [3, 7, 7]]), jnp.array([3, 1]))
  np.testing.assert_allclose(logits[0], reference[0, 4:7], atol=1e-5)
  np.testing.assert_allclose(logits[1], reference[0, 2:5], atol=1e-5)
  # Row 1 kept one token (3); rewind row 0 by two and feed other tokens.
  state = model.rewind(state, jnp.array([5, 3]))
  logits, _ = model.extend(state, jnp.array([[2, 11], [7, 7]]), jnp.array([2, 2]))
  np.testing.assert_allclose(logits[0], reference[0, 5:7], atol=1e-5)
  np.testing.assert_allclose(logits[1], reference[0, 3:5], atol=1e-5)


def test_rotary_preserves_norms_and_relative_positions():
  x = jax.random.normal(jax.random.key(0), (1, 2, 1, 8))
  rotated = rotary(x, jnp.array([[3, 10]]), 10000.0)
  np.testing.assert_allclose(jnp.linalg.norm(rotated, axis=-1), jnp.linalg.norm(x, axis=-1),
                             rtol=1e-5)  # fmt: skip
  q, k = x[:, :1], x[:, 1:]
  dot = lambda a, b: float(
    jnp.sum(rotary(q, jnp.array([[a]]), 1e4) * rotary(k, jnp.array([[b]]), 1e4))
  )  # noqa: E731, E501
  assert dot(2, 5) == pytest.approx(dot(12, 15), abs=1e-4)  # depends on b - a only


def _prefill(model, prompts, lengths):
  run = jax.jit(lambda p, n: model.init_state_with_features(p, n, 6))
  state, pending, features = run(jnp.asarray(prompts), jnp.asarray(lengths, jnp.int32))
  return state, pending, np.asarray(features)


@pytest.mark.parametrize("lengths, written", [([120, 70, 5], 128), ([200, 3, 64], 200)])
def test_a_padded_prefill_goes_in_passes_as_far_as_the_longest_row(lengths, written):
  """A prompt array padded to 200 positions, `padded_prefill` on: where the passes of
  PREFILL_CHUNK that the longest row needs cover at most PASSES_WORTH of the width (two
  passes, 128 positions) they are taken, each written position holds what one pass over
  the whole width writes there, and past the passes nothing is written; otherwise (200
  positions held) one pass."""
  model = DecoderOnly.init_random(TINY, seed=2)
  prompts = np.random.default_rng(0).integers(2, 50, (3, 200)).astype(np.int32)
  in_passes = _prefill(prefill.for_padded_prompts(model), prompts, lengths)
  one_pass = _prefill(model, prompts, lengths)
  np.testing.assert_array_equal(in_passes[0].end_index, np.asarray(lengths) - 1)
  np.testing.assert_array_equal(in_passes[1], one_pass[1])  # the pending tokens
  for a, b in zip(jax.tree.leaves(in_passes[0].caches), jax.tree.leaves(one_pass[0].caches)):
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    np.testing.assert_allclose(a[:, :written], b[:, :written], atol=1e-5)
    assert not a[:, written:].any()  # [batch, capacity, kv_heads, head_dim]
  np.testing.assert_allclose(in_passes[2][:, :written], one_pass[2][:, :written], atol=1e-5)
  assert not in_passes[2][:, written:].any()  # [batch, width, feature_size]
  assert np.asarray(one_pass[2])[:, 128:200].any()  # one pass writes the whole width


def test_decoding_after_a_prefill_in_passes_is_exact():
  """Prompts padded to 200 positions, the longest holding 120 (two passes of 64, both
  models' `padded_prefill` on): speculative greedy output equals plain greedy output."""
  target = prefill.for_padded_prompts(DecoderOnly.init_random(TINY, seed=0))
  draft = prefill.for_padded_prompts(DecoderOnly.init_random(TINY.replace(num_layers=1), seed=3))
  lengths = np.array([120, 9, 70], np.int32)
  prompts = np.random.default_rng(4).integers(2, 50, (3, 200)).astype(np.int32)
  greedy = SamplingConfig(0.0)
  plain = generate(target, prompts, prompt_lengths=lengths, max_new_tokens=12, sampling=greedy)
  spec = speculative_generate(target, draft, prompts, prompt_lengths=lengths, gamma=3,
                              max_new_tokens=12, sampling=greedy)  # fmt: skip
  np.testing.assert_array_equal(spec.tokens, plain.tokens)
  np.testing.assert_array_equal(spec.lengths, plain.lengths)


@pytest.mark.parametrize("gamma", [1, 3, 5])
def test_speculative_greedy_equals_autoregressive_greedy(gamma):
  target = DecoderOnly.init_random(TINY, seed=0)
  draft = DecoderOnly.init_random(
    DecoderOnlyConfig(vocab_size=50, d_model=16, num_heads=2, num_kv_heads=1, head_dim=8,
                      mlp_dim=24, num_layers=1, eos_id=1), seed=3,
  )  # fmt: skip
  prompts = [[5, 9, 3], [7], [2, 4, 6, 8, 10]]
  greedy = SamplingConfig(0.0)
  plain = generate(target, prompts, max_new_tokens=20, sampling=greedy)
  spec = speculative_generate(target, draft, prompts, gamma=gamma, max_new_tokens=20,
                              sampling=greedy)  # fmt: skip
  np.testing.assert_array_equal(spec.tokens, plain.tokens)
  np.testing.assert_array_equal(spec.lengths, plain.lengths)
  # The target as its own draft accepts everything.
  same = speculative_generate(target, target, prompts, gamma=gamma, max_new_tokens=20,
                              sampling=greedy)  # fmt: skip
  assert same.stats.alpha == 1.0


def test_bad_configs():
  with pytest.raises(ValueError, match="multiple"):
    DecoderOnlyConfig(num_heads=6, num_kv_heads=4)
  with pytest.raises(ValueError, match="even"):
    DecoderOnlyConfig(head_dim=7)
  with pytest.raises(ValueError, match="unknown preset"):
    preset("gpt-5")
