"""Dynamic draft trees: per-row tree calls equal chain calls, sampled sequences follow the
target's exact distribution (and a deliberately wrong rule fails the same test), greedy
output equals plain greedy (T5, decoder-only, sliding window, EOS inside the tree)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tiny_models import DECODER_CONFIG, greedy_case, models_with_prompts
from toy_pairs import (
  SamplingCase,
  assert_every_prompt_fits,
  assert_no_prompt_fits,
  assert_speculative_samples_fit,
  batched_prompts,
  make_pair,
  speculative_greedy_equals_plain,
)

from specsample import DynamicTree, SamplingConfig, generate, speculative_generate
from specsample.core import dynamic_tree as rules
from specsample.core.dynamic_tree import RowTrees, verify_dynamic_greedy
from specsample.decoding import clear_compiled_programs
from specsample.decoding.drafters import dynamic_tree as dynamic_drafter
from specsample.models.decoder_only import DecoderOnly

ROWS_PER_PROMPT = 5000


def test_layout_from_parents():
  trees = RowTrees.from_parents(jnp.array([[-1, 0, 0, 1, 3], [-1, 0, 1, 2, 0]]), 4)
  np.testing.assert_array_equal(trees.depths, [[0, 1, 1, 2, 3], [0, 1, 2, 3, 1]])
  assert trees.ancestors[0, 4].tolist() == [True, True, False, True, True]
  assert trees.ancestors[1, 4].tolist() == [True, False, False, False, True]
  np.testing.assert_array_equal(trees.path_to(jnp.array([4, 3]), 3), [[1, 3, 4], [1, 2, 3]])
  np.testing.assert_array_equal(trees.path_to(jnp.array([2, 0]), 3), [[2, 0, 0], [0, 0, 0]])
  np.testing.assert_array_equal(trees.back(jnp.array([[4, 2], [4, 2]]), 2), [[1, -1], [-1, 0]])


@pytest.mark.parametrize("index", [0, 1, 2], ids=["t5", "decoder_only", "sliding_window"])
def test_each_path_of_a_per_row_tree_call_scores_like_a_plain_call(index):
  """Two rows with different tree shapes in ONE call: every root-to-node path's logits
  equal an `extend` over that path alone, and keep_path continues like the plain call."""
  model, prompts = models_with_prompts()[index]
  lengths = jnp.array([4, 2], jnp.int32)
  state, pending = model.init_state(prompts, lengths, 16)
  parents = jnp.array([[-1, 0, 0, 1, 3], [-1, 0, 1, 0, 2]], jnp.int32)
  trees = RowTrees.from_parents(parents, 4)
  tokens = jnp.concatenate([pending[:, None], jnp.array([[11, 12, 13, 14], [15, 16, 17, 18]])], 1)
  tree_logits, tree_state = model.extend_tree(state, tokens, trees, 0)
  paths = [[[0, 1, 3, 4], [0, 2]], [[0, 1, 2, 4], [0, 3]]]  # per row: root-to-leaf slots
  for row in range(2):
    for path in paths[row]:
      path_tokens = tokens[:, jnp.array(path)]
      plain, plain_state = model.extend(state, path_tokens, jnp.array([len(path)] * 2))
      np.testing.assert_allclose(
        tree_logits[row, jnp.array(path)], plain[row], atol=2e-5, rtol=1e-5
      )
      slots = jnp.broadcast_to(jnp.asarray(path), (2, len(path)))
      kept = model.keep_path(tree_state, slots, jnp.array([len(path)] * 2))
      after_tree, _ = model.extend(kept, jnp.array([[30], [31]]), jnp.array([1, 1]))
      moved = model.rewind(plain_state, state.end_index + len(path))
      after_plain, _ = model.extend(moved, jnp.array([[30], [31]]), jnp.array([1, 1]))
      np.testing.assert_allclose(after_tree[row], after_plain[row], atol=2e-5, rtol=1e-5)


def test_greedy_verdict_takes_the_deepest_matching_path():
  trees = RowTrees.from_parents(jnp.array([[-1, 0, 0, 1, 2, 4]]), 5)
  tokens = jnp.array([[9, 3, 5, 7, 2, 6]])
  # argmax after each slot: root -> 5 (slot 2 matches), slot 2 -> 2 (slot 4), slot 4 -> 6
  # (slot 5), slot 5 -> 1; slot 1's child 7 never counts (slot 1 is not on the path).
  argmax = jnp.array([[5, 7, 2, 0, 6, 1]])
  n, slot, y = verify_dynamic_greedy(tokens, trees, jax.nn.one_hot(argmax, 10), 5)
  assert (int(n[0]), int(slot[0]), int(y[0])) == (3, 5, 1)


CASES = [
  # (temperature, top_k, top_p, gamma, max_new_tokens, order, eos_id), nodes, branching
  (SamplingCase(1.0, 0, 1.0, 2, 3, 1, None), 5, 3),
  (SamplingCase(0.5, 0, 1.0, 3, 3, 1, None), 6, 2),
  (SamplingCase(1.5, 3, 1.0, 3, 4, 1, None), 8, 4),
  (SamplingCase(1.0, 0, 0.8, 2, 4, 2, 1), 4, 2),
  (SamplingCase(1.0, 4, 0.9, 1, 3, 2, 1), 3, 3),
]


def _run(case: SamplingCase, nodes: int, branching: int):
  return case.samples(ROWS_PER_PROMPT, seed=11, pair_seed_offset=nodes,
                      tree=DynamicTree(nodes=nodes, branching=branching))  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("case,nodes,branching", CASES)
def test_dynamic_tree_decoding_is_lossless(case, nodes, branching):
  target, sampling, out = _run(case, nodes, branching)
  assert_every_prompt_fits(target, out, case.max_new_tokens, sampling)
  histogram = np.asarray(out.stats.accepted_histogram)
  assert histogram[0] > 0 and histogram[-1] > 0, histogram  # whole paths were accepted too


def _without_residual(key, tokens, trees, target_probs, max_depth, max_children):
  """WRONG: tries each child against the target's q itself, never removing rejected
  children from the residual (the correction then over-weights them)."""
  batch, size, vocab = target_probs.shape
  u = jax.random.uniform(key, (batch, max_depth + 1, max_children))
  node = jnp.zeros((batch,), jnp.int32)
  n = jnp.zeros((batch,), jnp.int32)
  done = jnp.zeros((batch,), bool)
  y = jnp.zeros((batch,), jnp.int32)
  for level in range(max_depth + 1):
    q = jnp.take_along_axis(target_probs, node[:, None, None], axis=1)[:, 0]
    is_child, rank = rules.child_rank(trees, node)
    accepted, child = jnp.zeros((batch,), bool), node
    for j in range(max_children):
      at_j = is_child & (rank == j)
      slot = jnp.argmax(at_j, axis=1).astype(jnp.int32)
      candidate = jnp.take_along_axis(tokens, slot[:, None], axis=1)[:, 0]
      q_c = jnp.take_along_axis(q, candidate[:, None], axis=1)[:, 0]
      takes = jnp.any(at_j, axis=1) & ~accepted & (u[:, level, j] < q_c)
      child, accepted = jnp.where(takes, slot, child), accepted | takes
    drawn = rules.sample_from_probs(jax.random.fold_in(key, level), q)
    y = jnp.where(~done & ~accepted, drawn, y)
    n = jnp.where(~done & accepted, n + 1, n)
    node = jnp.where(~done & accepted, child, node)
    done |= ~accepted
  return n, node, y


@pytest.mark.slow
def test_a_wrong_tree_rule_fails_the_same_test(monkeypatch):
  clear_compiled_programs(speculative_only=True)
  monkeypatch.setattr(dynamic_drafter, "verify_dynamic_sampling", _without_residual)
  try:
    target, sampling, out = _run(*CASES[0])
  finally:
    clear_compiled_programs(speculative_only=True)
  assert_no_prompt_fits(target, out, CASES[0][0].max_new_tokens, sampling)


def test_more_nodes_accept_more_per_target_call():
  target, draft = make_pair(seed=3, vocab=8, noise=1.5)
  calls = {}
  for nodes in (3, 6, 12):
    out = speculative_generate(
      target, draft, batched_prompts(200), gamma=3, max_new_tokens=12, seed=3,
      tree=DynamicTree(nodes=nodes, branching=3),
    )  # fmt: skip
    calls[nodes] = out.stats.tokens_per_target_call
  assert calls[3] < calls[6] < calls[12], calls


@pytest.mark.parametrize("family", ["t5", "decoder_only", "sliding_window"])
def test_greedy_dynamic_tree_equals_plain_greedy(family):
  if family == "t5":
    target, draft, prompts = greedy_case("t5")
  else:
    config = DECODER_CONFIG.replace(sliding_window=3 if family == "sliding_window" else None)
    target = DecoderOnly.init_random(config, seed=0)
    # a draft close to the target, so that deep paths are accepted and kept
    draft = jax.tree.map(lambda w: w + 0.02 * jax.random.normal(jax.random.key(1), w.shape), target)
    prompts = [[5, 6, 7], [9, 10, 11, 12, 13], [14]]
  greedy = SamplingConfig(0.0)
  plain = generate(target, prompts, max_new_tokens=14, sampling=greedy)
  for gamma, tree in (
    (3, DynamicTree(nodes=6, branching=2)),
    (5, DynamicTree(nodes=8, branching=3)),
  ):
    spec = speculative_generate(
      target, draft, prompts, gamma=gamma, max_new_tokens=14, sampling=greedy, tree=tree
    )
    assert spec.sequences() == plain.sequences(), (gamma, tree)


def test_greedy_dynamic_tree_with_a_good_draft_and_eos_inside_the_tree():
  target, draft = make_pair(seed=5, vocab=7, eos_id=1, noise=0.5)
  tree = DynamicTree(nodes=8, branching=3)
  spec = speculative_greedy_equals_plain(
    target, draft, batched_prompts(5), (4,), 10, tree=tree, trace=True
  )
  assert len({len(s) for s in spec.sequences()}) > 1  # rows end at different EOS
  assert spec.stats.tokens_per_target_call > 2.5


def test_dynamic_tree_refusals():
  target, draft = make_pair(seed=1, vocab=5)
  with pytest.raises(ValueError, match="verification must be 'token'"):
    speculative_generate(
      target, draft, [[1]], max_new_tokens=3, tree=DynamicTree(), verification="block"
    )
  with pytest.raises(ValueError, match="offers 4 nodes, fewer than nodes=16"):
    speculative_generate(target, draft, [[1]], gamma=1, max_new_tokens=3, tree=DynamicTree())
  with pytest.raises(ValueError, match="branching"):
    speculative_generate(
      target, draft, [[1]], gamma=2, max_new_tokens=3, tree=DynamicTree(nodes=4, branching=8)
    )
  with pytest.raises(ValueError, match="DynamicTree.nodes"):
    DynamicTree(nodes=0)
  from specsample.models.ngram import NGramDraft

  with pytest.raises(ValueError, match="extend_tree"):
    speculative_generate(
      target, NGramDraft.for_target(target), [[1, 2]], max_new_tokens=3, tree=DynamicTree(4)
    )


def _with_lookup(draft, target):
  from specsample.models.lookup_draft import LookupThenModel

  return LookupThenModel.for_target(draft, target, max_ngram=3, trust_ngram=1)


def test_greedy_dynamic_tree_with_prompt_lookup_as_a_branch():
  """Prompt lookup in front of the draft joins the tree as a branch of its own: greedy
  output stays plain greedy, and on text that repeats itself the branch adds accepted
  tokens per target call."""
  target, draft = make_pair(seed=8, vocab=9, order=2, noise=2.0)
  prompts = [[1, 2, 3, 4, 5, 1, 2, 3, 4, 5, 1, 2], [6, 7, 6, 7, 6, 7], [3, 3, 4]]
  greedy = SamplingConfig(0.0)
  plain = generate(target, prompts, max_new_tokens=16, sampling=greedy)
  tree = DynamicTree(nodes=4, branching=2)
  calls = {}
  for name, candidate in (("model", draft), ("lookup", _with_lookup(draft, target))):
    spec = speculative_generate(
      target, candidate, prompts, gamma=4, max_new_tokens=16, sampling=greedy, tree=tree
    )
    assert spec.sequences() == plain.sequences(), name
    calls[name] = spec.stats.tokens_per_target_call
  assert calls["lookup"] > calls["model"], calls


@pytest.mark.slow
def test_dynamic_tree_with_prompt_lookup_is_lossless():
  target, draft = make_pair(seed=21, vocab=6, order=2, eos_id=1)
  assert_speculative_samples_fit(
    target, _with_lookup(draft, target), SamplingConfig(temperature=1.0), ROWS_PER_PROMPT,
    gamma=3, max_new_tokens=4, seed=5, tree=DynamicTree(nodes=4, branching=2),
  )  # fmt: skip
