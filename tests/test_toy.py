"""MarkovLM: the model contract (cache, end index, rewind) and its exact distributions."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from specsample import SamplingConfig
from specsample.core import LanguageModel
from specsample.models import MarkovLM


def full_forward_logits(model: MarkovLM, sequence: list[int]) -> np.ndarray:
  """Logits after every position, computed from the table directly.  -> [len, vocab]."""
  table = np.asarray(model.logits_table)
  padded = [0] * model.order + sequence
  return np.stack([table[tuple(padded[i + 1 : i + 1 + model.order])] for i in range(len(sequence))])


def test_implements_the_contract():
  assert isinstance(MarkovLM.random(0, 5), LanguageModel)


@pytest.mark.parametrize("k", range(1, 7))
def test_prefill_extend_rewind_extend_equals_full_forward(k):
  model = MarkovLM.random(0, 7, order=2, max_length=64)
  rng = np.random.default_rng(k)
  prompts = rng.integers(0, 7, size=(3, 4))
  lengths = np.array([4, 2, 3])  # rows at different end indices
  state, pending = model.init_state(jnp.asarray(prompts), jnp.asarray(lengths), 20)
  assert np.asarray(state.end_index).tolist() == [3, 1, 2]
  assert np.asarray(pending).tolist() == [prompts[r, lengths[r] - 1] for r in range(3)]

  # Feed pending + k-1 wrong tokens, keep only a per-row prefix, then feed the true rest.
  junk = rng.integers(0, 7, size=(3, k - 1))
  _, state = model.extend(
    state, jnp.concatenate([pending[:, None], jnp.asarray(junk)], 1), jnp.full((3,), k)
  )
  keep = np.array([1, min(2, k), k])  # rows keep different numbers of tokens
  state = model.rewind(state, jnp.asarray(lengths - 1 + keep))
  rest = rng.integers(0, 7, size=(3, k))
  logits, state = model.extend(state, jnp.asarray(rest), jnp.full((3,), k))

  for row in range(3):
    sequence = (
      list(prompts[row, : lengths[row]]) + list(junk[row, : keep[row] - 1]) + list(rest[row])
    )
    expected = full_forward_logits(model, sequence)[-k:]
    np.testing.assert_allclose(np.asarray(logits[row]), expected)
  assert np.asarray(state.end_index).tolist() == (lengths - 1 + keep + k).tolist()


def test_num_valid_zero_leaves_the_row_alone():
  model = MarkovLM.random(1, 5)
  state, pending = model.init_state(jnp.array([[1, 2], [3, 4]]), jnp.array([2, 2]), 5)
  _, state = model.extend(state, jnp.array([[0, 0], [1, 1]]), jnp.array([0, 2]))
  assert np.asarray(state.end_index).tolist() == [1, 3]


def test_prompt_too_long_for_the_cache():
  model = MarkovLM.random(0, 5, max_length=10)
  with pytest.raises(ValueError, match="max_length is 10"):
    model.init_state(jnp.zeros((2, 8), jnp.int32), jnp.array([8, 8]), 5)


def test_bad_tables_are_rejected():
  with pytest.raises(ValueError, match="vocab"):
    MarkovLM(jnp.zeros((4, 5)))
  with pytest.raises(ValueError, match="eos_id"):
    MarkovLM(jnp.zeros((4, 4)), eos_id=4)


def test_exact_distribution():
  model = MarkovLM.random(3, 4, eos_id=1, scale=1.0)
  sampling = SamplingConfig(temperature=1.0)
  dist = model.exact_distribution([2], 3, sampling)
  assert sum(dist.values()) == pytest.approx(1.0)
  probs = model.next_token_probs(sampling)
  assert dist[(0, 3, 2)] == pytest.approx(probs[2, 0] * probs[0, 3] * probs[3, 2])
  assert dist[(1, 0, 0)] == pytest.approx(probs[2, 1])  # EOS first, then padding
  assert (1, 2, 3) not in dist  # nothing follows EOS
  greedy = model.exact_distribution([2], 3, SamplingConfig(temperature=0.0))
  assert list(greedy.values()) == [1.0]
