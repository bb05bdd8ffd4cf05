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


def test_one_token_catch_up_equals_the_two_token_call_when_no_row_owes_two():
  """The loop's lax.cond picks a 1-token catch-up when no row owes 2 tokens: it must give
  the same logits and state as the 2-token call it replaces (a T5 model, whose logits
  depend on the whole cache, at rows with different ends)."""
  from specsample.decoding.drafters import chain as spec
  from specsample.models.t5 import T5
  from specsample.models.t5.config import T5Config

  config = T5Config(
    vocab_size=23, d_model=16, num_heads=2, head_dim=8, mlp_dim=32,
    num_encoder_layers=1, num_decoder_layers=2,
  )  # fmt: skip
  draft = T5.init_random(config, seed=0)
  prompts = jnp.array([[3, 4, 5, 1], [6, 1, 0, 0]], jnp.int32)
  state, start = draft.init_state(prompts, jnp.array([4, 2], jnp.int32), 12)
  _, state = draft.extend(state, jnp.array([[start[0], 7, 8], [start[1], 9, 0]]), jnp.array([3, 2]))
  pending = jnp.array([[10, 0], [11, 0]], jnp.int32)
  catch_up = jnp.array([1, 0], jnp.int32)  # row 1 is done: it does not advance
  one_logits, one_state = spec.catch_up_one(draft, state, pending, catch_up)
  two_logits, two_state = spec.catch_up_two(draft, state, pending, catch_up)
  np.testing.assert_allclose(one_logits, two_logits, atol=1e-5)
  np.testing.assert_array_equal(one_state.end_index, two_state.end_index)
  np.testing.assert_array_equal(one_state.end_index, state.end_index + catch_up)
  # The next step sees the same cache either way.
  token = jnp.array([[12], [13]], jnp.int32)
  after_one = draft.extend(one_state, token, jnp.array([1, 1]))[0]
  after_two = draft.extend(two_state, token, jnp.array([1, 1]))[0]
  np.testing.assert_allclose(after_one, after_two, atol=1e-5)
