"""Greedy exactness: speculative greedy decoding equals autoregressive greedy decoding."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specsample import SamplingConfig, generate, speculative_generate
from specsample.models import MarkovLM

GREEDY = SamplingConfig(temperature=0.0)
EOS = 1


def chain_model(successor: dict[int, int], vocab: int = 8) -> MarkovLM:
  """A first-order model whose argmax follows `successor` (others get lower logits)."""
  table = np.array(jax.random.normal(jax.random.key(7), (vocab, vocab)))
  for token, nxt in successor.items():
    table[token, nxt] = 10.0
  return MarkovLM(jnp.asarray(table, jnp.float32), eos_id=EOS, pad_id=0)


# 0 -> 2 -> 3 -> 4 -> 5 -> 6 -> 7 -> EOS: a row ends after as many steps as its start is far.
CHAIN = {0: 2, 2: 3, 3: 4, 4: 5, 5: 6, 6: 7, 7: EOS, EOS: 2}


def assert_same_output(spec, plain):
  np.testing.assert_array_equal(np.asarray(spec.lengths), np.asarray(plain.lengths))
  np.testing.assert_array_equal(np.asarray(spec.tokens), np.asarray(plain.tokens))


@pytest.mark.parametrize("gamma", [1, 2, 4, 6])
def test_eos_inside_draft_block_and_rows_ending_at_different_steps(gamma):
  target = chain_model(CHAIN)
  prompts = [[0], [2], [3], [4], [5], [6], [7], [3, 6]]
  plain = generate(target, prompts, max_new_tokens=12, sampling=GREEDY)
  # A perfect draft: every block is accepted whole, so EOS lands inside blocks.
  spec = speculative_generate(
    target, target, prompts, gamma=gamma, max_new_tokens=12, sampling=GREEDY
  )
  assert_same_output(spec, plain)
  lengths = np.asarray(plain.lengths)
  assert lengths.tolist() == [7, 6, 5, 4, 3, 2, 1, 2]  # rows end at different steps
  tokens = np.asarray(spec.tokens)
  for row, length in zip(tokens, lengths):
    assert row[length - 1] == EOS
    assert (row[length:] == 0).all()  # padded after EOS: finished rows stopped changing
  assert spec.stats.alpha == 1.0


def test_greedy_with_a_draft_that_is_partly_wrong():
  target = chain_model(CHAIN)
  wrong = {**CHAIN, 6: 2}  # the draft errs after 6
  draft = chain_model(wrong)
  prompts = [[0], [2], [3], [4], [5], [6], [7], [3, 6]]
  plain = generate(target, prompts, max_new_tokens=12, sampling=GREEDY)
  spec = speculative_generate(target, draft, prompts, gamma=4, max_new_tokens=12, sampling=GREEDY)
  assert_same_output(spec, plain)
  histogram = np.asarray(spec.stats.accepted_histogram)
  assert histogram[:4].sum() > 0 and histogram[4] > 0  # some blocks cut short, some whole


@pytest.mark.parametrize("order", [1, 2])
@pytest.mark.parametrize("gamma", [1, 3, 5])
def test_random_models_many_prompts(order, gamma):
  """Random target/draft pairs, ragged prompts, EOS reachable: token-for-token equality."""
  for seed in range(4):
    target = MarkovLM.random(seed, 7, order=order, scale=2.0, eos_id=EOS)
    noise = jax.random.normal(jax.random.key(seed + 50), target.logits_table.shape)
    draft = dataclasses.replace(target, logits_table=target.logits_table + 1.5 * noise)
    rng = np.random.default_rng(seed)
    prompts = [rng.integers(0, 7, size=rng.integers(1, 5)).tolist() for _ in range(16)]
    plain = generate(target, prompts, max_new_tokens=15, sampling=GREEDY)
    for verification in ("token", "block", "greedy"):
      spec = speculative_generate(
        target,
        draft,
        prompts,
        gamma=gamma,
        max_new_tokens=15,
        sampling=GREEDY,
        verification=verification,
        seed=seed,
      )
      assert_same_output(spec, plain)


def test_max_new_tokens_cuts_inside_a_block():
  target = MarkovLM.random(0, 6, scale=2.0)  # no EOS: every row runs to max_new_tokens
  for max_new_tokens in (1, 2, 3, 7):
    plain = generate(target, [[1], [2, 3]], max_new_tokens=max_new_tokens, sampling=GREEDY)
    spec = speculative_generate(
      target, target, [[1], [2, 3]], gamma=5, max_new_tokens=max_new_tokens, sampling=GREEDY
    )
    assert_same_output(spec, plain)
    assert np.asarray(spec.lengths).tolist() == [max_new_tokens] * 2
