"""A dynamic draft tree (EAGLE-2 style), as a drafter: each row grows its own tree of the
draft's most likely continuations, and the target scores all of it in ONE call.

  1. Draft: catch up; the root's `branching` most likely children form depth 1. Each
     further depth (up to gamma) is ONE tree-shaped draft call over the current frontier
     (the `branching` best nodes of the last depth, by cumulative draft log-probability),
     whose nodes each offer their `branching` most likely children. Of every node offered,
     the `nodes` with the highest cumulative log-probability make the tree (a child never
     scores above its parent, so the chosen nodes hang together).
  2. Target: ONE tree-shaped call over [last, the chosen nodes] (core.dynamic_tree.RowTrees,
     each row's own layout).
  3. Verify: greedy keeps the deepest path matching the target's argmax; at temperature > 0
     multi-candidate rejection sampling from the root down (core.dynamic_tree), exact for
     candidates chosen without looking at the target.
  5. Both caches keep only the accepted path (`keep_path`); the draft keeps the path's
     nodes it ran and owes the rest of the committed tokens (y, and x_n when it never ran
     x_n; all of them after a lookup branch won).

With prompt lookup in front of the draft model (`core.contract.PromptLookupFront`), the
tree grows from the model alone and the lookup's continuation, up to gamma tokens while
it is found with trusted n-grams, joins it as one more branch from the root: lookup and
draft are verified in the same target call.

Models need `extend_tree` and `keep_path` that take a RowTrees layout (T5, DecoderOnly,
MarkovLM).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from specsample.core.dynamic_tree import RowTrees, verify_dynamic_greedy, verify_dynamic_sampling
from specsample.core.sampling import SamplingConfig, logits_to_probs, nonfinite_logits
from specsample.core.verification import VerificationRule
from specsample.decoding.drafters.base import Proposal, Scored, Verdict, bad_logits_used
from specsample.decoding.drafters.chain import catch_up, catch_up_two

MAX_NODES = 64
MAX_BRANCHING = 8
_FLOOR = -1e4  # log-probabilities are clamped here (p = 0, or a NaN), so scores stay ordered


@dataclasses.dataclass(frozen=True)
class DynamicTree:
  """Static settings of dynamic-tree drafting: `nodes` draft tokens per row and iteration
  (the target scores nodes + 1 positions in one call), grown `branching` children at a
  time; the tree's depth is the settings' gamma."""

  nodes: int = 16
  branching: int = 4

  def __post_init__(self):
    for name, value, top in (
      ("nodes", self.nodes, MAX_NODES),
      ("branching", self.branching, MAX_BRANCHING),
    ):
      if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= top:
        raise ValueError(f"DynamicTree.{name} must be an int in 1..{top}, got {value!r}")

  def offered(self, depth: int) -> int:
    """Nodes offered to the choice by a tree of this depth: the root's children, then
    `branching` children of each of `branching` frontier nodes per further depth."""
    return self.branching + (depth - 1) * self.branching**2


@struct.dataclass(kw_only=True)
class DynamicProposal(Proposal):
  """A dynamic tree: tokens int32[batch, nodes] (slots 1..nodes of `trees`, whose slot 0
  is the root), and where each node's draft keys/values lie."""

  trees: RowTrees  # [batch, slots]: the target call's layout (root, lookup branch, nodes)
  draft_slots: jax.Array  # int32[batch, slots]: each slot's draft tree slot (-1: none)
  lookup_state: Any = None  # the lookup's state after its catch-up (None without lookup)


@struct.dataclass(kw_only=True)
class DynamicTreeState:
  """What the drafter carries between iterations: committed tokens each part still owes."""

  model_state: Any  # the draft model's cache
  pending: jax.Array  # int32[batch, gamma + 1]: committed tokens the model has not seen
  num_pending: jax.Array  # int32[batch]: 1..gamma + 1
  lookup_state: Any = None  # prompt lookup's token history (None without lookup)
  lookup_pending: jax.Array | None = None  # int32[batch, gamma + 1]
  lookup_num_pending: jax.Array | None = None  # int32[batch]


def _catch_up(model, model_state, pending: jax.Array, num_pending: jax.Array):
  """The model consumes each row's pending tokens (int32[batch, W], num_pending
  int32[batch]; 0 for rows that sit out) -> (logits after each row's last [batch, vocab],
  state): one call as wide as W when some row owes more than 2 (after a lookup branch
  won), else the chain's 1- or 2-token catch-up."""

  def narrow(model, model_state, pending, num_pending):
    return catch_up(model, model_state, pending[:, :2], num_pending)

  return jax.lax.cond(  # catch_up_two takes every column: here all W
    jnp.any(num_pending > 2), catch_up_two, narrow, model, model_state, pending, num_pending
  )


def _best_children(logits: jax.Array, width: int, sampling) -> tuple[jax.Array, jax.Array]:
  """The `width` most likely next tokens and their log-probabilities under the draft (its
  logits over the temperature; the ranking alone, so top-k/top-p are not applied), NaN-free
  and floored.  [..., vocab] -> (float32[..., width], int32[..., width])."""
  logits = logits.astype(jnp.float32)
  if not sampling.is_greedy:
    logits = logits / sampling.temperature
  best, tokens = jax.lax.top_k(logits, width)  # the top of the logits: no softmax over all
  log_p = best - jax.nn.logsumexp(logits, axis=-1, keepdims=True)
  return jnp.maximum(jnp.nan_to_num(log_p, nan=_FLOOR), _FLOOR), tokens.astype(jnp.int32)


def _pick(values: jax.Array, index: jax.Array) -> jax.Array:
  """values[b, index[b, j]].  [batch, n, ...], int32[batch, k] -> [batch, k, ...]."""
  return jnp.take_along_axis(values, index.reshape(index.shape + (1,) * (values.ndim - 2)), 1)


@dataclasses.dataclass(frozen=True, eq=False)
class DynamicTreeDrafter:
  """Each row's own tree of `tree.nodes` draft tokens, at most gamma deep (and the
  lookup's branch when `lookup` is given)."""

  draft: Any  # the draft model (behind the lookup, when there is one)
  gamma: int  # the tree's depth
  sampling: SamplingConfig
  rule: str | VerificationRule
  tree: DynamicTree = DynamicTree()
  lookup: Any = None  # prompt lookup (core.contract.PromptLookupFront's), or None
  trust_ngram: int = 2

  @property
  def _lookup_slots(self) -> int:
    return self.gamma if self.lookup is not None else 0

  @property
  def _draft_slots(self) -> int:
    return (self.gamma - 1) * self.tree.branching  # the frontiers the draft ran

  def cache_positions(self, max_new_tokens: int) -> int:
    target = 1 + self._lookup_slots + self.tree.nodes
    draft = self.gamma + 1 + max(self._draft_slots, self._lookup_slots)
    return max_new_tokens + max(target, draft) + 1

  def init(self, target, prompts, prompt_lengths, num_new_positions):
    target_state, last_token = target.init_state(prompts, prompt_lengths, num_new_positions)
    model_state, pending = self.draft.init_state(prompts, prompt_lengths, num_new_positions)
    owed = jnp.full((pending.shape[0], self.gamma + 1), target.pad_id, jnp.int32)
    owed = owed.at[:, 0].set(pending)
    state = DynamicTreeState(
      model_state=model_state, pending=owed, num_pending=jnp.ones_like(pending)
    )
    if self.lookup is not None:
      lookup_state, _ = self.lookup.init_state(prompts, prompt_lengths, num_new_positions)
      state = state.replace(
        lookup_state=lookup_state, lookup_pending=owed, lookup_num_pending=jnp.ones_like(pending)
      )
    return target_state, last_token, state

  def _lookup_branch(self, state: DynamicTreeState, active):
    """The lookup's continuation: tokens int32[batch, gamma], whether each is trusted
    (found with trust_ngram or longer, and all before it too) bool[batch, gamma], and its
    state after the catch-up."""
    owed = jnp.where(active, state.lookup_num_pending, 0)
    proposals, lengths, caught_up = self.lookup.lookup(
      state.lookup_state, state.lookup_pending, owed
    )  # [batch, gamma + 1] each
    last = jnp.maximum(owed - 1, 0)[:, None]
    token = jnp.take_along_axis(proposals, last, axis=1)[:, 0]
    trusted = jnp.take_along_axis(lengths, last, axis=1)[:, 0] >= self.trust_ngram
    tokens, trust, lookup_state = [token], [trusted], caught_up
    for _ in range(self.gamma - 1):  # static: the lookup runs on its own proposals
      proposals, lengths, lookup_state = self.lookup.lookup(
        lookup_state, token[:, None], active.astype(jnp.int32)
      )
      token = proposals[:, 0]
      trusted = trusted & (lengths[:, 0] >= self.trust_ngram)
      tokens.append(token)
      trust.append(trusted)
    return jnp.stack(tokens, axis=1), jnp.stack(trust, axis=1), caught_up

  def propose(self, state: DynamicTreeState, active, key) -> Proposal:
    del key  # the tree is the draft's most likely nodes: no draws
    depth, width, sampling = self.gamma, self.tree.branching, self.sampling
    first_logits, draft_state = _catch_up(
      self.draft, state.model_state, state.pending, jnp.where(active, state.num_pending, 0)
    )  # [batch, vocab]
    batch = first_logits.shape[0]
    scores, tokens = _best_children(first_logits, width, sampling)  # [batch, w]
    # The offered nodes ("pool"), depth by depth; parents are pool indices (-1: the root).
    pool_tokens, pool_scores = [tokens], [scores]
    pool_parents = [jnp.full((batch, width), -1, jnp.int32)]
    pool_bad = [jnp.broadcast_to(nonfinite_logits(first_logits)[:, None], (batch, width))]
    ran = jnp.arange(width, dtype=jnp.int32) if depth > 1 else jnp.full((width,), -1, jnp.int32)
    pool_draft_slots = [jnp.broadcast_to(ran, (batch, width))]  # depth 1 runs when gamma > 1
    frontier = jnp.broadcast_to(jnp.arange(width, dtype=jnp.int32), (batch, width))  # pool index
    draft_parents = jnp.full((batch, max(self._draft_slots, 1)), -1, jnp.int32)
    offset = width
    for d in range(2, depth + 1):  # static: one tree call over depth d - 1's frontier
      start = (d - 2) * width  # the frontier's draft slots
      trees = RowTrees.from_parents(draft_parents, depth)
      logits, draft_state = self.draft.extend_tree(draft_state, tokens, trees, start)
      child_scores, child_tokens = _best_children(logits, width, sampling)  # [batch, w, w]
      child_scores = (scores[:, :, None] + child_scores).reshape(batch, width * width)
      child_tokens = child_tokens.reshape(batch, width * width)
      pool_tokens.append(child_tokens)
      pool_scores.append(child_scores)
      pool_parents.append(jnp.repeat(frontier, width, axis=1))
      pool_bad.append(jnp.repeat(nonfinite_logits(logits), width, axis=1))
      no_slot = jnp.full((batch, width * width), -1, jnp.int32)
      if d < depth:  # the next frontier: depth d's best nodes, run at the next call
        scores, best = jax.lax.top_k(child_scores, width)  # [batch, w]
        tokens = jnp.take_along_axis(child_tokens, best, axis=1)
        frontier = offset + best
        slots = start + width + jnp.arange(width, dtype=jnp.int32)
        draft_parents = draft_parents.at[:, slots].set(start + best // width)
        pool_draft_slots.append(
          no_slot.at[jnp.arange(batch)[:, None], best].set(jnp.broadcast_to(slots, (batch, width)))
        )
      else:
        pool_draft_slots.append(no_slot)
      offset += width * width

    # The tree: the `nodes` best offered nodes, in pool order (parents before children),
    # after the root and the lookup's branch (slots 1..L).
    lookup = self._lookup_slots
    pool_scores = jnp.concatenate(pool_scores, axis=1)  # [batch, pool]
    chosen = jnp.sort(jax.lax.top_k(pool_scores, self.tree.nodes)[1], axis=1)  # [batch, nodes]
    rows = jnp.arange(batch)[:, None]
    slot_of = (
      jnp.zeros_like(pool_scores, jnp.int32)
      .at[rows, chosen]
      .set(jnp.arange(1 + lookup, 1 + lookup + self.tree.nodes, dtype=jnp.int32))
    )  # [batch, pool]: each chosen node's slot in the target call (0: not chosen)
    parent = jnp.take_along_axis(jnp.concatenate(pool_parents, axis=1), chosen, axis=1)
    parent_slot = jnp.where(
      parent < 0, 0, jnp.take_along_axis(slot_of, jnp.maximum(parent, 0), axis=1)
    )
    root = jnp.full((batch, 1), -1, jnp.int32)
    node_tokens = jnp.take_along_axis(jnp.concatenate(pool_tokens, axis=1), chosen, axis=1)
    node_bad = jnp.take_along_axis(jnp.concatenate(pool_bad, axis=1), chosen, axis=1)
    draft_slots = jnp.take_along_axis(jnp.concatenate(pool_draft_slots, axis=1), chosen, axis=1)
    parents, lookup_state = [root, parent_slot], None
    if self.lookup is not None:  # a chain from the root while the lookup is trusted
      lookup_tokens, trusted, lookup_state = self._lookup_branch(state, active)
      chain = jnp.broadcast_to(jnp.arange(lookup, dtype=jnp.int32), (batch, lookup))
      parents = [root, jnp.where(trusted, chain, -1), parent_slot]  # untrusted: no parent
      node_tokens = jnp.concatenate([lookup_tokens, node_tokens], axis=1)
      node_bad = jnp.pad(node_bad, ((0, 0), (lookup, 0)))
      draft_slots = jnp.pad(draft_slots, ((0, 0), (lookup, 0)), constant_values=-1)
    return DynamicProposal(
      tokens=node_tokens,
      probs=None,
      bad=node_bad,
      num_drafted=None,
      steps=depth,
      model_state=draft_state,
      trees=RowTrees.from_parents(jnp.concatenate(parents, axis=1), depth),
      draft_slots=jnp.concatenate([root, draft_slots], axis=1),
      lookup_state=lookup_state,
    )

  def score(self, target, target_state, last_token, proposal: DynamicProposal, active) -> Scored:
    """ONE target call over [last, the lookup's branch, the nodes] -> logits [batch,
    slots, vocab]."""
    tokens = jnp.concatenate([last_token[:, None], proposal.tokens], axis=1)
    logits, target_state = target.extend_tree(target_state, tokens, proposal.trees, 0)
    return Scored(logits=logits, target_state=target_state)

  def verify(self, key, proposal: DynamicProposal, scored: Scored, active) -> Verdict:
    depth, trees = self.gamma, proposal.trees
    tokens = jnp.pad(proposal.tokens, ((0, 0), (1, 0)))  # [batch, slots]: slot 0 the root
    if self.sampling.is_greedy:
      n, slot, y = verify_dynamic_greedy(tokens, trees, scored.logits, depth)
    else:
      q = logits_to_probs(scored.logits, self.sampling)  # [batch, slots, vocab]
      children = self.tree.branching + (self.lookup is not None)  # the root's, at most
      n, slot, y = verify_dynamic_sampling(key, tokens, trees, q, depth, children)
    path = trees.path_to(slot, depth)  # [batch, depth]: slots of depth 1..n, then 0
    along = jnp.concatenate([jnp.zeros_like(path[:, :1]), path], axis=1)  # [batch, depth + 1]
    bad = jnp.pad(proposal.bad, ((0, 0), (1, 0)))
    target_bad, draft_bad = bad_logits_used(
      _pick(scored.logits, along), jnp.take_along_axis(bad, path, axis=1), n, active
    )
    within = jnp.arange(1, depth + 1)[None, :] <= n[:, None]
    in_tree = jnp.sum(trees.parents[:, 1:] >= 0, axis=1, dtype=jnp.int32)  # [batch]
    return Verdict(
      n=n,
      y=y,
      path=jnp.where(within, jnp.take_along_axis(tokens, path, axis=1), 0),  # [batch, depth]
      num_drafted=jnp.full_like(n, depth),
      target_bad=target_bad,
      draft_bad=draft_bad,
      num_proposed=in_tree,
      chosen=slot,
    )

  def advance(self, state, target, target_state, proposal, scored, verdict, active):
    """The target keeps last and the path's n nodes; the draft model keeps the path's
    nodes it ran (x_1..x_{n-1} at least on its own branch, none on the lookup's) and owes
    the committed tokens after them; the lookup owes all committed tokens."""
    depth, n = self.gamma, verdict.n
    path = proposal.trees.path_to(verdict.chosen, depth)  # [batch, depth]
    along = jnp.concatenate([jnp.zeros_like(path[:, :1]), path], axis=1)  # [batch, depth + 1]
    target_state = target.keep_path(scored.target_state, along, jnp.where(active, n + 1, 0))
    slots = jnp.take_along_axis(proposal.draft_slots, path, axis=1)  # [batch, depth]
    within = jnp.arange(1, depth + 1)[None, :] <= n[:, None]
    kept = jnp.sum(jnp.cumprod(within & (slots >= 0), axis=1), axis=1, dtype=jnp.int32)
    model_state = proposal.model_state
    if depth > 1:
      kept_slots = jnp.maximum(slots[:, : depth - 1], 0)
      model_state = self.draft.keep_path(model_state, kept_slots, jnp.where(active, kept, 0))
    committed = verdict.committed()  # [batch, depth + 1]: x_1..x_n, y
    offsets = jnp.minimum(kept[:, None] + jnp.arange(depth + 1), depth)
    pending = jnp.take_along_axis(committed, offsets, axis=1)  # x_{kept+1}..x_n, y
    state = state.replace(
      model_state=model_state,
      pending=jnp.where(active[:, None], pending, state.pending),
      num_pending=jnp.where(active, n + 1 - kept, state.num_pending),
    )
    if self.lookup is not None:
      state = state.replace(
        lookup_state=proposal.lookup_state,
        lookup_pending=jnp.where(active[:, None], committed, state.lookup_pending),
        lookup_num_pending=jnp.where(active, n + 1, state.lookup_num_pending),
      )
    return target_state, state
