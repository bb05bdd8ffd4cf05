"""Multi-draft (tree) decoding: tree-shaped model calls equal chain calls, sequences are
exact (and a deliberately wrong multi-draft rule fails the same test), greedy output
equals plain greedy on T5 and the decoder-only model."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tiny_models import (
  DECODER_CONFIG,
  assert_tree_chains_score_like_plain_calls,
  greedy_case,
  models_with_prompts,
)
from toy_pairs import (
  SamplingCase,
  assert_every_prompt_fits,
  assert_no_prompt_fits,
  batched_prompts,
  make_pair,
  speculative_greedy_equals_plain,
)

from specsample import DraftTree, speculative_generate
from specsample.core.sampling import sample_from_probs
from specsample.core.tree import TreeLayout, chain_slots, verify_tree_greedy
from specsample.decoding import clear_compiled_programs
from specsample.decoding.drafters import tree as tree_drafter
from specsample.models.decoder_only import DecoderOnly

ROWS_PER_PROMPT = 6000


def test_layout_of_chains():
  layout = TreeLayout.chains(2, 3, root=True)
  assert layout.parents == (-1, 0, 0, 1, 2, 3, 4)
  np.testing.assert_array_equal(layout.depths, [0, 1, 1, 2, 2, 3, 3])
  assert layout.ancestors[5].tolist() == [True, True, False, True, False, True, False]
  np.testing.assert_array_equal(chain_slots(2, 3), [[0, 1, 3, 5], [0, 2, 4, 6]])
  assert layout.back(5, 1) == 3 and layout.back(5, 3) == 0 and layout.back(5, 5) == -2
  with pytest.raises(ValueError, match="parent"):
    TreeLayout((0,))


@pytest.mark.parametrize("index", [0, 1, 2], ids=["t5", "decoder_only", "sliding_window"])
def test_each_chain_of_a_tree_call_scores_like_a_plain_call(index):
  """The logits of chain j inside one tree call equal an `extend` over that chain alone,
  and after keep_path the cache continues as if only that chain had been extended."""
  model, prompts = models_with_prompts()[index]
  lengths = jnp.array([4, 2], jnp.int32)
  state, pending = model.init_state(prompts, lengths, 16)
  chains = jnp.array([[[11, 12, 13], [14, 15, 16]], [[17, 18, 19], [20, 21, 22]]], jnp.int32)
  layout = TreeLayout.chains(2, 3, root=True)
  next_tokens = jnp.array([[30, 31], [32, 33]], jnp.int32)
  assert_tree_chains_score_like_plain_calls(
    model, state, pending, chains, layout, jnp.array([3, 2]), next_tokens
  )


def test_draft_side_tree_calls_continue_chains_written_earlier():
  """A draft writes its chains one depth per call (start > 0): each depth's logits equal
  the plain chain's."""
  model = DecoderOnly.init_random(DECODER_CONFIG, seed=2)
  state, pending = model.init_state(jnp.array([[5, 6, 7]], jnp.int32), jnp.array([3]), 16)
  _, state = model.extend(state, pending[:, None], jnp.array([1]))
  layout = TreeLayout.chains(2, 2, root=False)
  chains = jnp.array([[[11, 12], [13, 14]]], jnp.int32)  # [batch, K, depth]
  first, tree_state = model.extend_tree(state, chains[:, :, 0], layout, 0)
  second, _ = model.extend_tree(tree_state, chains[:, :, 1], layout, 2)
  for j in range(2):
    plain, _ = model.extend(state, chains[:, j], jnp.array([2]))
    np.testing.assert_allclose(first[:, j], plain[:, 0], atol=2e-5, rtol=1e-5)
    np.testing.assert_allclose(second[:, j], plain[:, 1], atol=2e-5, rtol=1e-5)


CASES = [
  # (temperature, top_k, top_p, gamma, max_new_tokens, order, eos_id), num_chains
  (SamplingCase(1.0, 0, 1.0, 2, 3, 1, None), 2),
  (SamplingCase(0.5, 0, 1.0, 3, 3, 1, None), 3),
  (SamplingCase(1.5, 3, 1.0, 2, 4, 1, None), 4),
  (SamplingCase(1.0, 0, 0.8, 3, 4, 2, 1), 2),
  (SamplingCase(1.0, 4, 0.9, 1, 3, 2, 1), 3),
]


def _run(case: SamplingCase, num_chains: int):
  return case.samples(ROWS_PER_PROMPT, seed=7, tree=DraftTree(num_chains))


@pytest.mark.slow
@pytest.mark.parametrize("case,num_chains", CASES)
def test_tree_decoding_is_lossless(case, num_chains):
  target, sampling, out = _run(case, num_chains)
  assert_every_prompt_fits(target, out, case.max_new_tokens, sampling)
  histogram = np.asarray(out.stats.accepted_histogram)
  assert histogram[0] > 0 and histogram[1:].sum() > 0, histogram


def _without_residual_updates(key, chain_tokens, draft_probs, target_probs):
  """WRONG: tests every candidate against q itself (no residual after a rejection) and
  draws the correction from the single-draft residual norm(max(0, q - p))."""
  batch, num_chains, gamma = chain_tokens.shape
  accept_key, sample_key = jax.random.split(key)
  u = jax.random.uniform(accept_key, (batch, num_chains))
  p, q = draft_probs[:, 0, 0], target_probs[:, 0, 0]
  x = chain_tokens[:, :, 0]  # depth 1 only; a wrong rule needs no more
  ratio = jnp.take_along_axis(q, x, 1) / jnp.take_along_axis(p, x, 1)
  takes = u < ratio  # [batch, K]
  any_take = jnp.any(takes, axis=1)
  chain = jnp.argmax(takes, axis=1).astype(jnp.int32)
  residual = jnp.maximum(q - p, 0.0)
  bonus = jnp.take_along_axis(target_probs[:, :, 1], chain[:, None, None], 1)[:, 0]
  y = sample_from_probs(sample_key, jnp.where(any_take[:, None], bonus, residual))
  return any_take.astype(jnp.int32), chain, y


@pytest.mark.slow
def test_a_wrong_multi_draft_rule_fails_the_same_test(monkeypatch):
  clear_compiled_programs(speculative_only=True)
  monkeypatch.setattr(tree_drafter, "verify_tree_sampling", _without_residual_updates)
  try:
    target, sampling, out = _run(SamplingCase(1.0, 0, 1.0, 1, 3, 1, None), 3)
  finally:
    clear_compiled_programs(speculative_only=True)
  assert_no_prompt_fits(target, out, 3, sampling)


def test_more_chains_accept_more_per_target_call():
  """The point of trees: at the same depth, K i.i.d. chains give more tokens per call."""
  target, draft = make_pair(seed=3, vocab=8, noise=1.5)
  calls = {}
  for chains in (None, 2, 4):
    out = speculative_generate(
      target, draft, batched_prompts(300), gamma=3, max_new_tokens=12, seed=3, tree=chains
    )
    calls[chains] = out.stats.tokens_per_target_call
  assert calls[None] < calls[2] < calls[4], calls


def test_greedy_tree_verdict_takes_the_longest_matching_chain():
  chain_tokens = jnp.array([[[1, 2, 3], [1, 2, 4], [5, 0, 0]]])  # [1, K=3, gamma=3]
  argmax = jnp.array([[[1, 2, 4, 7], [1, 2, 4, 6], [1, 2, 4, 6]]])  # target argmax per chain
  scores = jax.nn.one_hot(argmax, 8)
  n, chain, y = verify_tree_greedy(chain_tokens, scores)
  assert (int(n[0]), int(chain[0]), int(y[0])) == (3, 1, 6)


@pytest.mark.parametrize("family,num_chains", [("t5", 2), ("decoder_only", 3)])
def test_greedy_tree_equals_plain_greedy(family, num_chains):
  target, draft, prompts = greedy_case(family)
  speculative_greedy_equals_plain(target, draft, prompts, (3,), 14, tree=num_chains)


def test_greedy_tree_with_a_good_draft_and_eos_inside_blocks():
  target, draft = make_pair(seed=5, vocab=7, eos_id=1, noise=0.5)
  prompts = batched_prompts(5)
  spec = speculative_greedy_equals_plain(target, draft, prompts, (4,), 10, tree=2, trace=True)
  assert len({len(s) for s in spec.sequences()}) > 1  # the plain output's (they are equal)
  assert spec.stats.tokens_per_target_call > 1.5


def test_tree_refusals():
  target, draft = make_pair(seed=1, vocab=5)
  with pytest.raises(ValueError, match="verification must be 'token'"):
    speculative_generate(target, draft, [[1]], max_new_tokens=3, tree=2, verification="block")
  with pytest.raises(ValueError, match="cannot be combined"):
    speculative_generate(target, draft, [[1]], max_new_tokens=3, tree=2, adaptive=True)
  with pytest.raises(ValueError, match="num_chains"):
    DraftTree(1)
  from specsample.models.ngram import NGramDraft

  with pytest.raises(ValueError, match="extend_tree"):
    speculative_generate(target, NGramDraft.for_target(target), [[1, 2]], max_new_tokens=3, tree=2)
