"""The verification rules as pure functions, and the block-verification golden case."""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from specsample import SamplingConfig, speculative_generate
from specsample.core import (
  block_acceptance_probabilities,
  expected_accepted_tokens,
  mean_acceptance_probability,
  verify_block,
  verify_greedy,
  verify_tokenwise,
)
from specsample.models import MarkovLM

GOLDEN_DRAFT = np.array([2 / 3, 1 / 3])
GOLDEN_TARGET = np.array([1 / 3, 2 / 3])


def exact_expected_accepted_tokenwise(p: np.ndarray, q: np.ndarray, gamma: int) -> float:
  """Context-independent p, q: E[n] from the library's acceptance rate and speedup model."""
  alpha = float(mean_acceptance_probability(jnp.asarray(p), jnp.asarray(q)))
  return expected_accepted_tokens(alpha, gamma)


def exact_expected_accepted_block(p: np.ndarray, q: np.ndarray, gamma: int) -> float:
  """Context-independent p, q: E[tau] exactly, by enumerating every draft block and taking
  the library's acceptance probabilities h_i for it (`block_acceptance_probabilities`):
  P(tau = i) = h_i * prod_{j > i} (1 - h_j), the largest i whose coin came up."""
  blocks = np.array(list(itertools.product(range(len(p)), repeat=gamma)), np.int32)
  draft_probs = np.broadcast_to(p, (len(blocks), gamma, len(p)))
  target_probs = np.broadcast_to(q, (len(blocks), gamma + 1, len(q)))
  _, h = block_acceptance_probabilities(
    jnp.asarray(blocks),
    jnp.asarray(draft_probs, jnp.float32),
    jnp.asarray(target_probs, jnp.float32),
  )
  h = np.asarray(h, np.float64)  # [blocks, gamma]
  total = 0.0
  for block, hs in zip(blocks, h):
    expected_tau = sum(
      i * hs[i - 1] * np.prod([1 - hj for hj in hs[i:]]) for i in range(1, gamma + 1)
    )
    total += np.prod(p[block]) * expected_tau
  return float(total)


def test_golden_case_exact_values():
  """design.md's golden case: 10/9 token-wise, 11/9 block, from the library's own rules."""
  assert exact_expected_accepted_tokenwise(GOLDEN_DRAFT, GOLDEN_TARGET, 2) == pytest.approx(10 / 9)
  assert exact_expected_accepted_block(GOLDEN_DRAFT, GOLDEN_TARGET, 2) == pytest.approx(
    11 / 9, abs=1e-6
  )


def test_block_acceptance_probabilities_by_hand():
  """gamma 2, p = (2/3, 1/3), q = (1/3, 2/3): the four blocks' P and h written out."""
  blocks = jnp.array([[0, 0], [0, 1], [1, 0], [1, 1]], jnp.int32)
  p = jnp.broadcast_to(jnp.asarray(GOLDEN_DRAFT, jnp.float32), (4, 2, 2))
  q = jnp.broadcast_to(jnp.asarray(GOLDEN_TARGET, jnp.float32), (4, 3, 2))
  weight, h = block_acceptance_probabilities(blocks, p, q)
  # P_1 = min(1, q(x1)/p(x1)): 1/2 for a, 1 for b; P_2 = min(1, P_1 q(x2)/p(x2)).
  np.testing.assert_allclose(
    weight, [[1, 0.5, 0.25], [1, 0.5, 1], [1, 1, 0.5], [1, 1, 1]], rtol=1e-6
  )
  # S_1 = sum max(0, P_1 q - p): 0 for P_1 = 1/2, 1/3 for P_1 = 1; h_1 = S_1 / (S_1 + 1 - P_1).
  np.testing.assert_allclose(h[:, 0], [0.0, 0.0, 1.0, 1.0], atol=1e-6)
  np.testing.assert_allclose(h[:, 1], weight[:, 2], rtol=1e-6)  # h_gamma = P_gamma


def context_free_model(probs: np.ndarray) -> MarkovLM:
  """A MarkovLM whose next-token distribution is `probs` whatever the context."""
  table = np.tile(np.log(probs), (len(probs), 1))
  return MarkovLM(jnp.asarray(table, jnp.float32))


@pytest.mark.slow
@pytest.mark.parametrize("rule,expected", [("token", 10 / 9), ("block", 11 / 9)])
def test_golden_case_through_the_decoder(rule, expected):
  """Mean accepted draft tokens per iteration: 10/9 token-wise, 11/9 block.

  About 48,000 row-iterations; the standard error of the mean is ~0.004, the tolerance
  0.02 (5 standard errors). The rule's verdicts are read off the trace: the statistics
  count only the tokens the output kept, and a row's last iteration is cut at
  max_new_tokens.
  """
  target, draft = context_free_model(GOLDEN_TARGET), context_free_model(GOLDEN_DRAFT)
  out = speculative_generate(
    target,
    draft,
    [[0]] * 4000,
    gamma=2,
    max_new_tokens=24,
    sampling=SamplingConfig(temperature=1.0),
    verification=rule,
    seed=0,
    trace=True,
  )
  verdicts = np.asarray(out.trace.accepted)[np.asarray(out.trace.active)]
  assert verdicts.size > 40_000
  assert verdicts.mean() == pytest.approx(expected, abs=0.02)
  histogram = np.asarray(out.stats.accepted_histogram)
  assert histogram.sum() == verdicts.size
  assert out.stats.tokens_per_target_call == pytest.approx(out.lengths.sum() / verdicts.size)


def random_pair(seed: int, vocab: int) -> tuple[np.ndarray, np.ndarray]:
  rng = np.random.default_rng(seed)
  p, q = rng.dirichlet(np.ones(vocab)), rng.dirichlet(np.ones(vocab))
  return p, q


@pytest.mark.parametrize("seed", range(12))
def test_block_never_below_tokenwise(seed):
  """Sun et al.'s guarantee, for the library's block rule against its token-wise model."""
  vocab, gamma = 3 + seed % 3, 1 + seed % 4
  p, q = random_pair(seed, vocab)
  block = exact_expected_accepted_block(p, q, gamma)
  token = exact_expected_accepted_tokenwise(p, q, gamma)
  assert block >= token - 1e-6
  if gamma == 1:
    assert block == pytest.approx(token, abs=1e-6)  # one token: block verification is token-wise


def sample_block(key, p: np.ndarray, q: np.ndarray, gamma: int, batch: int):
  """Draft blocks drawn from context-independent p, with p and q broadcast to the batch."""
  tokens = jax.random.categorical(key, jnp.log(jnp.asarray(p)), shape=(batch, gamma))
  draft_probs = jnp.broadcast_to(jnp.asarray(p, jnp.float32), (batch, gamma, len(p)))
  target_probs = jnp.broadcast_to(jnp.asarray(q, jnp.float32), (batch, gamma + 1, len(q)))
  return tokens.astype(jnp.int32), draft_probs, target_probs


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_block_rule_matches_its_exact_expectation(seed):
  vocab, gamma, batch = 4, 3, 200_000
  p, q = random_pair(100 + seed, vocab)
  tokens, draft_probs, target_probs = sample_block(jax.random.key(seed), p, q, gamma, batch)
  verdict = verify_block(jax.random.key(seed + 7), tokens, draft_probs, target_probs)
  n = np.asarray(verdict.num_accepted)
  exact = exact_expected_accepted_block(p, q, gamma)
  assert n.mean() == pytest.approx(exact, abs=5 * n.std() / np.sqrt(batch))


@pytest.mark.parametrize("rule", [verify_tokenwise, verify_block])
@pytest.mark.parametrize("seed", [0, 1])
def test_first_committed_token_follows_target(rule, seed):
  """One iteration: the first committed token (x_1 if kept, else y) is distributed as q_1."""
  vocab, gamma, batch = 5, 3, 200_000
  p, q = random_pair(200 + seed, vocab)
  tokens, draft_probs, target_probs = sample_block(jax.random.key(seed), p, q, gamma, batch)
  n, y = rule(jax.random.key(seed + 1), tokens, draft_probs, target_probs)
  first = np.where(np.asarray(n) > 0, np.asarray(tokens[:, 0]), np.asarray(y))
  observed = np.bincount(first, minlength=vocab)
  assert stats.chisquare(observed, q * batch).pvalue > 1e-4
  # The draft alone would fail the same test.
  assert (
    stats.chisquare(np.bincount(np.asarray(tokens[:, 0]), minlength=vocab), q * batch).pvalue < 1e-6
  )


def test_tokenwise_never_accepts_impossible_tokens_and_always_accepts_cheap_ones():
  draft_probs = jnp.array([[[0.5, 0.5, 0.0], [0.5, 0.5, 0.0]]])  # [1, 2, 3]
  target_probs = jnp.array([[[0.0, 0.5, 0.5], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]])
  for seed in range(20):
    n, y = verify_tokenwise(jax.random.key(seed), jnp.array([[0, 1]]), draft_probs, target_probs)
    assert int(n[0]) == 0 and int(y[0]) == 2  # q(0) = 0: rejected; residual is all on token 2
    n, y = verify_tokenwise(jax.random.key(seed), jnp.array([[1, 1]]), draft_probs, target_probs)
    assert int(n[0]) == 2 and int(y[0]) == 2  # q >= p on both: kept; bonus from q_3


def test_greedy_rule():
  target = jax.nn.one_hot(jnp.array([[3, 1, 2, 0], [0, 0, 0, 0], [1, 2, 3, 3]]), 4)
  tokens = jnp.array([[3, 1, 0], [1, 0, 0], [1, 2, 3]])
  n, y = verify_greedy(tokens, target)
  assert np.asarray(n).tolist() == [2, 0, 3]
  assert np.asarray(y).tolist() == [2, 0, 3]


def test_rules_reject_mismatched_shapes():
  tokens = jnp.zeros((2, 3), jnp.int32)
  with pytest.raises(ValueError, match="gamma \\+ 1"):
    verify_tokenwise(jax.random.key(0), tokens, jnp.ones((2, 3, 4)), jnp.ones((2, 3, 4)))
  with pytest.raises(ValueError, match="vocab"):
    verify_block(jax.random.key(0), tokens, jnp.ones((2, 3, 5)), jnp.ones((2, 4, 4)))
