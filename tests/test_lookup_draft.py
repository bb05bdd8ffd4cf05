"""A draft model behind prompt lookup (LookupThenModel): its proposals come from the lookup
exactly where a long enough n-gram recurs, from the model elsewhere; greedy output stays
the target's and sampled sequences follow the target's exact distribution."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from toy_pairs import (
  REPEATING_PROMPTS,
  assert_speculative_samples_fit,
  speculative_greedy_equals_plain,
)

from specsample import SamplingConfig
from specsample.models import MarkovLM
from specsample.models.lookup_draft import LookupThenModel
from specsample.models.ngram import NGramDraft


def draft_logits(draft, history: list[int], feed: list[int]) -> np.ndarray:
  """Logits [len(feed), vocab] after each token of `feed`, `history` consumed first."""
  prompt = history + [feed[0]]
  state, pending = draft.init_state(jnp.array([prompt]), jnp.array([len(prompt)]), 16)
  assert int(pending[0]) == feed[0]
  logits, state = draft.extend(state, jnp.array([feed]), jnp.array([len(feed)]))
  assert int(state.end_index[0]) == len(prompt) - 1 + len(feed)
  return np.asarray(logits[0])


def test_lookup_where_a_long_enough_ngram_recurs_the_model_elsewhere():
  vocab = 12
  model = MarkovLM.random(3, vocab, scale=2.0)
  target = MarkovLM.random(4, vocab)
  draft = LookupThenModel.for_target(model, target, max_ngram=3, trust_ngram=2, doubt=0.0)
  history, feed = [4, 5, 6, 1, 3, 4], [5, 9, 3]
  logits = draft_logits(draft, history, feed)  # [3, vocab]
  model_logits = draft_logits(model, history, feed)
  # After "4 5" (a 2-gram seen before, followed by 6): the lookup's one-hot proposal.
  assert np.argmax(logits[0]) == 6 and np.isinf(logits[0]).sum() == vocab - 1
  # After "5 9" and "9 3": never seen as 2-grams ("3" alone recurs, but 1 < trust_ngram).
  np.testing.assert_array_equal(logits[1:], model_logits[1:])
  # With trust_ngram=1 the lone "3" (followed by 4 before) is trusted too.
  loose = LookupThenModel.for_target(model, target, max_ngram=3, trust_ngram=1)
  assert np.argmax(draft_logits(loose, history, feed)[2]) == 4


def test_a_shorter_ngram_is_used_where_the_model_is_in_doubt():
  """After "9 3" only the lone "3" recurs (followed by 4): its continuation is proposed
  exactly where the model's top probability there is below `doubt`."""
  vocab = 12
  model = MarkovLM.random(3, vocab, scale=2.0)
  target = MarkovLM.random(4, vocab)
  history, feed = [4, 5, 6, 1, 3, 4], [5, 9, 3]
  model_logits = draft_logits(model, history, feed)
  top = float(np.max(np.exp(model_logits[2]) / np.exp(model_logits[2]).sum()))
  assert np.argmax(model_logits[2]) != 4  # the model alone would propose another token
  for doubt, lookup_used in [(top * 1.01, True), (top * 0.99, False)]:
    draft = LookupThenModel.for_target(model, target, trust_ngram=2, doubt=doubt)
    logits = draft_logits(draft, history, feed)
    assert np.argmax(logits[0]) == 6  # a trusted 2-gram whatever the model's probability
    assert (np.argmax(logits[2]) == 4) == lookup_used
    # "5 9": "9" occurs nowhere earlier: the model's logits whatever its doubt.
    np.testing.assert_array_equal(logits[1], model_logits[1])
    if not lookup_used:
      np.testing.assert_array_equal(logits[2], model_logits[2])


def test_bad_settings_are_refused():
  model = MarkovLM.random(3, 8)
  with pytest.raises(ValueError, match="trust_ngram"):
    LookupThenModel.for_target(model, model, max_ngram=2, trust_ngram=3)
  with pytest.raises(ValueError, match="vocabulary"):
    LookupThenModel(model, NGramDraft(vocab_size=9))
  with pytest.raises(ValueError, match="doubt"):
    LookupThenModel(model, NGramDraft(vocab_size=8), doubt=1.5)


def test_greedy_output_equals_the_targets():
  target = MarkovLM.random(0, 8, eos_id=1, scale=3.0)
  draft = LookupThenModel.for_target(MarkovLM.random(5, 8, scale=3.0), target)
  prompts = [[2, 3, 4, 2, 3], [5], [6, 7, 6, 7, 6, 7]]
  spec = speculative_greedy_equals_plain(target, draft, prompts, (1, 4, 7), max_new_tokens=24)
  assert spec.stats.rejected.sum() > 0  # the model's guesses are not always right


ROWS_PER_PROMPT = 6000


@pytest.mark.slow
@pytest.mark.parametrize("rule,gamma", [("token", 3), ("block", 4)])
def test_sequences_follow_the_exact_target_distribution(rule, gamma):
  """Lookup where the prefix repeats (a 2-gram, or a lone token where the model is in
  doubt), a (different) model elsewhere: one p(.|prefix)."""
  target = MarkovLM.random(7, 5, scale=2.0)
  model = MarkovLM.random(8, 5, scale=2.0)
  draft = LookupThenModel.for_target(model, target, trust_ngram=2, doubt=0.6)
  out = assert_speculative_samples_fit(
    target, draft, SamplingConfig(temperature=1.0), ROWS_PER_PROMPT, REPEATING_PROMPTS,
    gamma=gamma, max_new_tokens=4, verification=rule, seed=17,
  )  # fmt: skip
  assert 0.1 < out.stats.alpha < 0.95


def test_rewind_moves_both_parts_by_the_same_number_of_positions():
  model = MarkovLM.random(3, 8)
  draft = LookupThenModel.for_target(model, model)
  state, _ = draft.init_state(jnp.array([[2, 3, 4, 5]]), jnp.array([4]), 8)
  _, state = draft.extend(state, jnp.array([[5, 6, 7]]), jnp.array([3]))
  assert int(state.end_index[0]) == 6
  # A model counting its positions from elsewhere (a T5 decoder starts at 0).
  state = state.replace(model=state.model.replace(end_index=state.model.end_index - 3))
  back = draft.rewind(state, state.end_index - 2)
  assert int(back.lookup.end_index[0]) == 4 and int(back.model.end_index[0]) == 1
