"""What users pass in: padded prompt arrays, token id types, seeds, tiny temperatures.

Each case here once gave a silently wrong output (issue 14): padded arrays decoded their
pads, floats were rounded into token ids, a flat list became one-token prompts, and tiny
temperatures gave NaN probabilities and garbage tokens.
"""

from __future__ import annotations

import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specsample import SamplingConfig, generate, load_t5, speculative_generate
from specsample.core.sampling import logits_to_probs
from specsample.models import MarkovLM

TINY_T5X = pathlib.Path(__file__).parent / "fixtures" / "t5x" / "test_t5_tiny.checkpoint_0"
TARGET = MarkovLM.random(0, 8, eos_id=1, max_length=64)
DRAFT = MarkovLM.random(1, 8, eos_id=1, max_length=64)


@pytest.fixture(scope="module")
def tiny_t5():
  return load_t5(TINY_T5X)


def test_padded_t5_prompt_arrays_decode_like_ragged_lists(tiny_t5):
  """T5X/seqio batches are right-padded with 0; the pads must not reach the encoder."""
  ragged = [[13, 7, 2048, 99, 32100, 5, 1], [42, 17, 8, 1]]
  padded = np.array([[13, 7, 2048, 99, 32100, 5, 1], [42, 17, 8, 1, 0, 0, 0]])
  greedy = SamplingConfig(temperature=0.0)
  kwargs = {"max_new_tokens": 12, "sampling": greedy}
  expected = generate(tiny_t5, ragged, **kwargs).sequences()
  assert generate(tiny_t5, padded, **kwargs).sequences() == expected
  spec = speculative_generate(tiny_t5, tiny_t5, padded, gamma=3, **kwargs).sequences()
  assert spec == expected
  # Reading the pads as tokens gives another output: the test can tell the two apart.
  full = generate(tiny_t5, padded, prompt_lengths=[7, 7], **kwargs).sequences()
  assert full[1] != expected[1]


def test_t5_prompt_rows_of_only_padding_are_refused(tiny_t5):
  with pytest.raises(ValueError, match=r"rows \[1\] hold only padding"):
    generate(tiny_t5, np.array([[5, 1], [0, 0]]), max_new_tokens=4)


def test_array_rows_ending_in_pad_are_refused_where_pad_is_a_token():
  """MarkovLM (like decoder-only LLMs) can read its pad id as a token: an array row that
  ends with it is ambiguous, so it needs prompt_lengths."""
  with pytest.raises(ValueError, match=r"rows \[1\] end with the pad id 0.*prompt_lengths"):
    generate(TARGET, np.array([[2, 3], [4, 0]]), max_new_tokens=4)
  kwargs = {"max_new_tokens": 4, "sampling": SamplingConfig(temperature=0.0)}
  out = generate(TARGET, np.array([[2, 3], [4, 0]]), prompt_lengths=[2, 1], **kwargs)
  assert out.sequences()[1] == generate(TARGET, [[4]], **kwargs).sequences()[0]


@pytest.mark.parametrize(
  "prompts,error,match",
  [
    ([5, 6, 1], TypeError, r"list of token lists.*\[\[5, 6, 1\]\]"),
    ([[13.9, 7.2, 1.0]], TypeError, "integer token ids.*float"),
    ([["13", "7"]], TypeError, "integer token ids"),
    (["abc"], TypeError, "must be a list of int token ids"),
    ([[True, False]], TypeError, "integer token ids.*bool"),
    ([[[1, 2]]], ValueError, "flat list"),
    (np.array([[1.0, 2.0]]), TypeError, "integer"),
    (np.array([[True, False]]), TypeError, "integer"),
  ],
)
def test_non_integer_prompts_are_refused_not_coerced(prompts, error, match):
  for call in (
    lambda: generate(TARGET, prompts, max_new_tokens=4),
    lambda: speculative_generate(TARGET, DRAFT, prompts, gamma=2, max_new_tokens=4),
  ):
    with pytest.raises(error, match=match):
      call()


def test_numpy_integer_rows_are_fine():
  rows = [np.array([2, 3], np.int16), (4,), jnp.array([5, 6, 7])]
  expected = generate(TARGET, [[2, 3], [4], [5, 6, 7]], max_new_tokens=5).sequences()
  assert generate(TARGET, rows, max_new_tokens=5).sequences() == expected


@pytest.mark.parametrize("seed", [2**63, 2**70, -(2**63) - 1])
def test_seeds_outside_the_key_range_are_refused(seed):
  with pytest.raises(ValueError, match=r"seed must be in \[-2\*\*63, 2\*\*63\)"):
    generate(TARGET, [[2]], max_new_tokens=3, seed=seed)


def test_every_bit_of_a_64_bit_seed_counts():
  """jax.random.key keeps the low 32 bits without 64-bit ints: seeds that differ above
  them must still give different keys (and texts); 32-bit seeds keep jax's own keys."""
  from specsample.decoding.inputs import make_key

  seeds = [0, 1, 2**32, 2**32 + 1, 2**62, -1, 2**32 - 1, -(2**63), 2**63 - 1]
  keys = {seed: tuple(np.asarray(jax.random.key_data(make_key(seed)))) for seed in seeds}
  assert len(set(keys.values())) == len(seeds)
  for seed in (0, 1, 2**32 - 1):
    assert keys[seed] == tuple(np.asarray(jax.random.key_data(jax.random.key(seed))))
  sampled = [
    generate(TARGET, [[2]], max_new_tokens=24, sampling=SamplingConfig(1.0), seed=seed).tokens
    for seed in (0, 2**32)
  ]
  assert not np.array_equal(*sampled)


def test_subnormal_temperatures_are_refused():
  with pytest.raises(ValueError, match="smallest normal.*use 0 for greedy"):
    SamplingConfig(temperature=1e-45)


@pytest.mark.parametrize("temperature", [1e-8, 1e-30, 1.2e-38])
def test_tiny_temperatures_give_finite_probabilities_and_greedy_tokens(temperature):
  model = MarkovLM.random(0, 8, scale=10)
  sampling = SamplingConfig(temperature=temperature)
  probs = jax.jit(lambda logits: logits_to_probs(logits, sampling))(model.logits_table)
  probs = np.asarray(probs)
  assert np.isfinite(probs).all()
  np.testing.assert_allclose(probs.sum(-1), 1.0, rtol=1e-6)
  greedy = np.asarray(jnp.argmax(model.logits_table, -1))
  np.testing.assert_array_equal(probs.argmax(-1), greedy)
  assert (probs.max(-1) > 0.99).all()  # the logits' gaps are >> temperature
  expected = generate(model, [[2, 3]], max_new_tokens=16, sampling=SamplingConfig(0.0))
  for verification in ("token", "block"):
    out = speculative_generate(
      model,
      MarkovLM.random(1, 8, scale=10),
      [[2, 3]],
      gamma=3,
      max_new_tokens=16,
      sampling=sampling,
      verification=verification,
    )
    assert out.sequences() == expected.sequences()


def test_extreme_logits_stay_finite():
  logits = jnp.array([[3e38, -3e38, 0.0, -jnp.inf], [1.0, 1.0, -jnp.inf, -jnp.inf]])
  for temperature in (1e-6, 1.0, 1e30):
    probs = np.asarray(logits_to_probs(logits, SamplingConfig(temperature=temperature)))
    assert np.isfinite(probs).all(), temperature
    np.testing.assert_allclose(probs.sum(-1), 1.0, rtol=1e-6)
    assert probs[0, 3] == 0 and probs[1, 2] == probs[1, 3] == 0
