"""T5 behind the model contract: cache correctness, speculative greedy and sampling."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats
from tiny_models import tiny_config, tiny_pair

from specsample import SamplingConfig, generate, speculative_generate
from specsample.core import LanguageModel, logits_to_probs
from specsample.models.t5 import T5

GREEDY = SamplingConfig(temperature=0.0)

# Jitted contract calls (eager flax dispatch is slow); the model is a pytree argument.
init_state = jax.jit(lambda m, p, l, n: m.init_state(p, l, n), static_argnums=3)
extend = jax.jit(lambda m, s, t, n: m.extend(s, t, n))
forward = jax.jit(lambda m, e, d: m.forward(e, d))


@pytest.fixture(scope="module", params=["t5.1.0", "t5.1.1"])
def model(request) -> T5:
  return T5.init_random(tiny_config(request.param), seed=3)


def test_implements_the_contract(model):
  assert isinstance(model, LanguageModel)


@pytest.mark.parametrize("k", range(1, 9))
def test_prefill_extend_rewind_extend_equals_full_forward(model, k):
  """Rows at different end indices; junk written past the kept prefix must not matter."""
  rng = np.random.default_rng(k)
  batch, vocab = 3, model.vocab_size
  prompts = rng.integers(2, vocab, size=(batch, 6))
  lengths = np.array([6, 3, 5])
  prompts[np.arange(6)[None] >= lengths[:, None]] = 0
  prefix_lengths = np.array([1, 4, 2])  # decoder tokens already in the cache, per row
  junk = rng.integers(2, vocab, size=(batch, k))
  rest = rng.integers(2, vocab, size=(batch, k))
  prefix = rng.integers(2, vocab, size=(batch, 4))
  prefix[:, 0] = 0  # the decoder start token

  state, pending = init_state(model, jnp.asarray(prompts), jnp.asarray(lengths), 24)
  assert np.asarray(pending).tolist() == [0] * batch
  _, state = extend(model, state, jnp.asarray(prefix), jnp.asarray(prefix_lengths))
  _, state = extend(model, state, jnp.asarray(junk), jnp.full((batch,), k, jnp.int32))
  state = model.rewind(state, jnp.asarray(prefix_lengths))  # forget the junk
  logits, state = extend(model, state, jnp.asarray(rest), jnp.full((batch,), k, jnp.int32))
  assert np.asarray(state.end_index).tolist() == (prefix_lengths + k).tolist()

  for row in range(batch):
    decoder = np.concatenate([prefix[row, : prefix_lengths[row]], rest[row]])
    full = forward(model, jnp.asarray(prompts[row : row + 1]), jnp.asarray(decoder[None]))
    np.testing.assert_allclose(logits[row], full[0, -k:], atol=1e-5, rtol=1e-5)


def test_verify_call_equals_single_steps(model):
  """One k-token extend gives the logits of k one-token extends."""
  prompts = jnp.array([[5, 6, 7, 1], [8, 9, 1, 0]])
  lengths = jnp.array([4, 3])
  tokens = jnp.array([[0, 11, 12, 13, 14], [0, 15, 16, 17, 18]])
  state, _ = init_state(model, prompts, lengths, 8)
  at_once, _ = extend(model, state, tokens, jnp.array([5, 5]))
  steps = []
  for t in range(5):
    logits, state = extend(model, state, tokens[:, t : t + 1], jnp.array([1, 1]))
    steps.append(logits[:, 0])
  np.testing.assert_allclose(at_once, jnp.stack(steps, 1), atol=1e-5, rtol=1e-5)


def ragged_prompts(seed: int, count: int, vocab: int) -> list[list[int]]:
  rng = np.random.default_rng(seed)
  return [rng.integers(2, vocab, size=rng.integers(2, 9)).tolist() + [1] for _ in range(count)]


@pytest.mark.parametrize("gamma", [1, 3, 6])
def test_speculative_greedy_with_t5_pair_equals_autoregressive(gamma):
  target, draft = tiny_pair()
  prompts = ragged_prompts(gamma, 6, target.vocab_size)
  plain = generate(target, prompts, max_new_tokens=16, sampling=GREEDY)
  for verification in ("token", "block"):
    spec = speculative_generate(
      target,
      draft,
      prompts,
      gamma=gamma,
      max_new_tokens=16,
      sampling=GREEDY,
      verification=verification,
    )
    np.testing.assert_array_equal(spec.tokens, plain.tokens)
    np.testing.assert_array_equal(spec.lengths, plain.lengths)
  # The target is its own perfect draft: every block accepted.
  self_spec = speculative_generate(
    target, target, prompts, gamma=gamma, max_new_tokens=16, sampling=GREEDY
  )
  np.testing.assert_array_equal(self_spec.tokens, plain.tokens)
  assert self_spec.stats.alpha == 1.0


def test_greedy_rows_end_at_eos_at_different_steps():
  """A target whose EOS logit is boosted so that rows finish inside the budget."""
  target, draft = tiny_pair(seed=5)
  params = jax.tree_util.tree_map(lambda x: x, target.params)
  kernel = params["decoder"]["logits_dense"]["kernel"]
  params["decoder"]["logits_dense"]["kernel"] = kernel.at[:, 1].add(1.5 * jnp.abs(kernel).max())
  eos_target = T5(params=params, config=target.config)
  prompts = ragged_prompts(11, 8, target.vocab_size)
  plain = generate(eos_target, prompts, max_new_tokens=20, sampling=GREEDY)
  lengths = np.asarray(plain.lengths)
  assert (lengths < 20).any() and len(set(lengths.tolist())) > 1, lengths
  spec = speculative_generate(
    eos_target, draft, prompts, gamma=4, max_new_tokens=20, sampling=GREEDY
  )
  np.testing.assert_array_equal(spec.tokens, plain.tokens)


@pytest.mark.slow
def test_sampled_first_two_tokens_follow_the_target():
  """Speculative samples of (t1, t2) against the target's exact two-token distribution."""
  target, draft = tiny_pair(vocab=16, seed=2)
  sampling = SamplingConfig(temperature=1.0)
  prompt = [5, 9, 3, 1]
  rows = 6000
  out = speculative_generate(
    target, draft, [prompt] * rows, gamma=3, max_new_tokens=2, sampling=sampling, seed=7
  )
  tokens = np.asarray(out.tokens)
  # Exact: p(t1) p(t2 | t1), with the target's decoder run over every possible t1.
  vocab = target.vocab_size
  decoder = np.stack([np.zeros(vocab, np.int32), np.arange(vocab)], 1)  # [vocab, 2]
  logits = target.forward(jnp.asarray([prompt] * vocab), jnp.asarray(decoder))
  probs = np.asarray(logits_to_probs(logits, sampling), np.float64)  # [vocab, 2, vocab]
  first, second = probs[0, 0], probs[:, 1]
  exact = first[:, None] * second  # [t1, t2]
  ended = tokens[:, 0] == target.eos_id  # EOS first: t2 is padding
  observed = np.zeros((vocab, vocab))
  np.add.at(observed, (tokens[~ended, 0], tokens[~ended, 1]), 1)
  expected = exact * rows
  expected[target.eos_id] = 0
  big = expected >= 5
  f_obs = np.append(observed[big], observed[~big].sum() + ended.sum())
  f_exp = np.append(expected[big], expected[~big].sum() + first[target.eos_id] * rows)
  f_exp *= f_obs.sum() / f_exp.sum()  # float32 probabilities: renormalise
  assert stats.chisquare(f_obs, f_exp).pvalue > 1e-4
  assert 0.05 < out.stats.alpha < 0.95
  # The draft's own samples fail the same test: the check has power.
  draft_tokens = np.asarray(
    generate(draft, [prompt] * rows, max_new_tokens=1, sampling=sampling, seed=7).tokens
  )[:, 0]
  draft_counts = np.bincount(draft_tokens, minlength=vocab)
  assert stats.chisquare(draft_counts, first * rows / first.sum()).pvalue < 1e-6
