"""Logits processing: temperature, top-k, top-p, greedy; against a numpy reference."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from specsample import SamplingConfig
from specsample.core import argmax_tokens, logits_to_probs, nonfinite_logits, sample_from_probs


def reference_probs(logits: np.ndarray, temperature: float, top_k: int, top_p: float):
  """Straightforward one-row reference: sort, cut, renormalise."""
  if temperature == 0:
    out = np.zeros_like(logits)
    out[np.argmax(logits)] = 1.0
    return out
  z = logits / temperature
  keep = np.ones(len(z), bool)
  if 0 < top_k < len(z):
    keep &= z >= np.sort(z)[::-1][top_k - 1]
  z = np.where(keep, z, -np.inf)
  if top_p < 1:
    probs = np.exp(z - z.max())
    probs /= probs.sum()
    order = np.argsort(-probs, kind="stable")
    cumulative = 0.0
    kept = set()
    for token in order:
      if cumulative >= top_p:
        break
      kept.add(token)
      cumulative += probs[token]
    threshold = min(z[t] for t in kept)
    z = np.where(z >= threshold, z, -np.inf)
  probs = np.exp(z - z.max())
  return probs / probs.sum()


@pytest.mark.parametrize(
  "temperature,top_k,top_p",
  [
    (1.0, 0, 1.0),
    (0.5, 0, 1.0),
    (2.0, 0, 1.0),
    (1.0, 3, 1.0),
    (1.0, 0, 0.6),
    (0.7, 4, 0.8),
    (1.0, 1, 1.0),
    (1.0, 0, 0.01),
    (0.0, 0, 1.0),
  ],
)
def test_matches_reference(temperature, top_k, top_p):
  logits = np.asarray(jax.random.normal(jax.random.key(0), (16, 10)) * 3, np.float64)
  sampling = SamplingConfig(temperature=temperature, top_k=top_k, top_p=top_p)
  got = np.asarray(logits_to_probs(jnp.asarray(logits, jnp.float32), sampling))
  for row, expected_row in zip(got, logits):
    np.testing.assert_allclose(
      row, reference_probs(expected_row, temperature, top_k, top_p), atol=1e-6
    )


def test_top_k_keeps_exactly_k_and_top_p_keeps_the_smallest_prefix():
  logits = jnp.log(jnp.array([[0.1, 0.4, 0.2, 0.3]]))
  probs = logits_to_probs(logits, SamplingConfig(top_k=2))
  np.testing.assert_allclose(probs, [[0, 4 / 7, 0, 3 / 7]], atol=1e-6)
  probs = logits_to_probs(logits, SamplingConfig(top_p=0.7))  # 0.4 + 0.3 reaches 0.7
  np.testing.assert_allclose(probs, [[0, 4 / 7, 0, 3 / 7]], atol=1e-6)
  probs = logits_to_probs(logits, SamplingConfig(top_p=0.71))  # needs the third token too
  np.testing.assert_allclose(probs, [[0, 4 / 9, 2 / 9, 3 / 9]], atol=1e-6)


def test_ties_at_the_cut_are_kept_and_greedy_picks_the_lowest_id():
  logits = jnp.array([[1.0, 2.0, 2.0, 0.0]])
  np.testing.assert_allclose(logits_to_probs(logits, SamplingConfig(top_k=1)), [[0, 0.5, 0.5, 0]])
  np.testing.assert_array_equal(
    logits_to_probs(logits, SamplingConfig(temperature=0)), [[0, 1, 0, 0]]
  )


def test_sampling_never_draws_zero_probability_tokens():
  probs = jnp.broadcast_to(jnp.array([0.0, 0.3, 0.0, 0.7]), (50_000, 4))
  tokens = np.asarray(sample_from_probs(jax.random.key(1), probs))
  counts = np.bincount(tokens, minlength=4)
  assert counts[0] == counts[2] == 0
  assert counts[3] / len(tokens) == pytest.approx(0.7, abs=0.01)


def test_nonfinite_detection():
  logits = jnp.array(
    [[0.0, 1.0], [jnp.nan, 1.0], [jnp.inf, 0.0], [-jnp.inf, 0.0], [-jnp.inf, -jnp.inf]]
  )
  assert np.asarray(nonfinite_logits(logits)).tolist() == [False, True, True, False, True]


@pytest.mark.parametrize(
  "kwargs,error,match",
  [
    ({"temperature": -0.1}, ValueError, "temperature"),
    ({"temperature": float("nan")}, ValueError, "temperature"),
    ({"temperature": "hot"}, TypeError, "temperature"),
    ({"top_k": -1}, ValueError, "top_k"),
    ({"top_k": 2.5}, TypeError, "top_k"),
    ({"top_p": 0.0}, ValueError, "top_p"),
    ({"top_p": 1.5}, ValueError, "top_p"),
    ({"top_p": -0.2}, ValueError, "top_p"),
  ],
)
def test_bad_settings_are_rejected(kwargs, error, match):
  with pytest.raises(error, match=match):
    SamplingConfig(**kwargs)


def test_equal_settings_are_equal_and_hash_equal():
  assert SamplingConfig(temperature=1, top_p=1) == SamplingConfig()
  assert hash(SamplingConfig(temperature=1)) == hash(SamplingConfig(temperature=1.0))
  assert SamplingConfig(temperature=0).is_greedy and not SamplingConfig().is_greedy


@pytest.mark.parametrize("vocab", [5, 300, 1000])
def test_inverse_cdf_sampler_follows_the_distribution(vocab):
  """Blocks of 128 tokens: one, several, and a ragged last block; some blocks empty."""
  rng = np.random.default_rng(vocab)
  probs = rng.dirichlet(np.full(vocab, 0.3))
  probs[rng.random(vocab) < 0.3] = 0.0  # zero entries, whole zero blocks for small alpha
  if vocab > 256:
    probs[128:256] = 0.0
  probs /= probs.sum()
  batch = 200_000
  tokens = np.asarray(
    sample_from_probs(
      jax.random.key(3), jnp.broadcast_to(jnp.asarray(probs, jnp.float32), (batch, vocab))
    )
  )
  counts = np.bincount(tokens, minlength=vocab)
  assert counts[probs == 0].sum() == 0
  expected = probs * batch
  big = expected >= 5
  observed, expected = counts[big], expected[big]
  if (~big).any():
    observed = np.append(observed, counts[~big].sum())
    expected = np.append(expected, probs[~big].sum() * batch)
  assert stats.chisquare(observed, expected * observed.sum() / expected.sum()).pvalue > 1e-4


def test_sampler_accepts_unnormalised_rows_and_leading_batch_dims():
  probs = jnp.array([[[0.0, 2.0, 0.0], [5.0, 0.0, 0.0]]])  # [1, 2, 3]
  tokens = np.asarray(sample_from_probs(jax.random.key(0), probs))
  assert tokens.tolist() == [[1, 0]]


def test_argmax_tokens_equals_argmax_with_ties():
  scores = jax.random.normal(jax.random.key(0), (4, 7, 300))
  scores = jnp.round(scores * 2) / 2  # many ties
  np.testing.assert_array_equal(argmax_tokens(scores), jnp.argmax(scores, axis=-1))


@pytest.mark.parametrize("top_p", [0.3, 0.9, 0.99])
def test_top_p_on_a_large_vocabulary_matches_the_sorting_reference(top_p):
  logits = np.asarray(jax.random.normal(jax.random.key(5), (6, 2000)) * 4, np.float64)
  logits[0, :10] = 8.0  # ties at the top
  got = np.asarray(logits_to_probs(jnp.asarray(logits, jnp.float32), SamplingConfig(top_p=top_p)))
  for row, raw in zip(got, logits):
    expected = reference_probs(raw, 1.0, 0, top_p)
    np.testing.assert_array_equal(row > 0, expected > 0)  # the same nucleus
    np.testing.assert_allclose(row, expected, atol=1e-6)
