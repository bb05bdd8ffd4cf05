"""Prompt-lookup (n-gram) drafting inside the compiled loop: its proposals, greedy output
equal to the target's, and whole-sequence exactness with both verification rules."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from toy_pairs import (
  REPEATING_PROMPTS,
  assert_speculative_samples_fit,
  speculative_greedy_equals_plain,
)

from specsample import SamplingConfig, generate, speculative_generate
from specsample.models import DecoderOnly, DecoderOnlyConfig, MarkovLM
from specsample.models.ngram import NGramDraft


def proposals(draft: NGramDraft, history: list[int], feed: list[int]) -> list[int]:
  """Proposals after each token of `feed`, with `history` already consumed."""
  prompt = history + [feed[0]]
  state, pending = draft.init_state(jnp.array([prompt]), jnp.array([len(prompt)]), 16)
  assert int(pending[0]) == feed[0]
  logits, _ = draft.extend(state, jnp.array([feed]), jnp.array([len(feed)]))
  assert np.isinf(np.asarray(logits)).sum(-1).tolist() == [[draft.vocab_size - 1] * len(feed)]
  return np.asarray(jnp.argmax(logits[0], -1)).tolist()


def test_the_latest_occurrence_of_the_longest_ngram_wins():
  draft = NGramDraft(vocab_size=12, max_ngram=3)
  # After "... 4 5": the 2-gram "4 5" occurred twice, followed by 6 then by 7: latest -> 7.
  assert proposals(draft, [4, 5, 6, 1, 4, 5, 7, 9, 4], [5]) == [7]
  # "9 4 5" (3-gram) occurred once, followed by 6; the 2-gram "4 5" later before 8.
  assert proposals(draft, [9, 4, 5, 6, 4, 5, 8, 9, 4], [5]) == [6]
  # Only a 1-gram: "3" was followed by 10 most recently.
  assert proposals(draft, [3, 2, 3, 10, 1], [3]) == [10]
  # Never seen: the last token again.
  assert proposals(draft, [1, 2], [11]) == [11]
  # Several tokens in one call, each position with what came before it.
  assert proposals(draft, [1, 2, 3, 1], [2, 3, 1]) == [3, 1, 2]


def test_min_ngram_and_bad_settings():
  assert proposals(NGramDraft(vocab_size=12, min_ngram=2), [3, 2, 3, 10, 1], [3]) == [3]
  with pytest.raises(ValueError, match="min_ngram"):
    NGramDraft(vocab_size=5, min_ngram=3, max_ngram=2)


def test_greedy_output_equals_the_targets():
  target = MarkovLM.random(0, 8, eos_id=1, scale=3.0)
  draft = NGramDraft.for_target(target)
  prompts = [[2, 3, 4, 2, 3], [5], [6, 7, 6, 7, 6]]
  spec = speculative_greedy_equals_plain(target, draft, prompts, (1, 4, 8), max_new_tokens=24)
  assert spec.stats.alpha > 0.5  # a low-entropy chain repeats itself: lookups pay


def test_greedy_output_equals_a_decoder_only_targets():
  config = DecoderOnlyConfig(
    vocab_size=64, d_model=32, num_heads=4, num_kv_heads=2, head_dim=8, mlp_dim=48,
    num_layers=2, eos_id=1,
  )  # fmt: skip
  target = DecoderOnly.init_random(config, seed=2)
  rng = np.random.default_rng(0)
  prompts = [rng.integers(2, 64, size=n).tolist() * 3 for n in (4, 7, 2)]
  greedy = SamplingConfig(temperature=0.0)
  plain = generate(target, prompts, max_new_tokens=30, sampling=greedy)
  spec = speculative_generate(target, NGramDraft.for_target(target), prompts, gamma=5,
                              max_new_tokens=30, sampling=greedy)  # fmt: skip
  assert spec.sequences() == plain.sequences()


ROWS_PER_PROMPT = 6000


@pytest.mark.slow
@pytest.mark.parametrize(
  "rule,temperature,top_p,gamma", [("token", 1.0, 1.0, 3), ("block", 1.0, 1.0, 3),
                                   ("token", 0.7, 0.9, 2), ("block", 1.3, 1.0, 4)],
)  # fmt: skip
def test_sequences_follow_the_exact_target_distribution(rule, temperature, top_p, gamma):
  """A deterministic proposal is a one-hot p: the output must still be the target's."""
  target = MarkovLM.random(7, 5, scale=2.0)
  sampling = SamplingConfig(temperature=temperature, top_p=top_p)
  out = assert_speculative_samples_fit(
    target, NGramDraft.for_target(target), sampling, ROWS_PER_PROMPT, REPEATING_PROMPTS,
    gamma=gamma, max_new_tokens=4, verification=rule, seed=99,
  )  # fmt: skip
  assert 0.1 < out.stats.alpha < 0.95  # informative: some accepted, some rejected
