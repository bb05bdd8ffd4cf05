"""Dynamic token trees: each row's own tree of candidate tokens, verified in one target call.

A dynamic tree (EAGLE-2, Li et al. 2024; SpecInfer, Miao et al. 2023) has a shape chosen
while drafting, per row: `RowTrees` is its traced layout, slot by slot (a slot's parent
is an earlier slot, or -1 for a child of the committed prefix), with each slot's depth
and the ancestor relation that the tree-attention mask is made of. Slot 0 of a verified
tree is the root (the pending token); the candidates hang below it.

Rules (which path of candidates the target keeps, and the token after it):
- `verify_dynamic_greedy`: temperature 0; the deepest slot whose every token, from the
  root down, is the target's argmax after its parent, then the argmax after it.
- `verify_dynamic_sampling`: exactly the target's distribution at temperature > 0, for
  candidates chosen in any way that does not look at the target (here: the draft's most
  likely children). At the current slot (from the root), its children c_1..c_m are tried
  in order against a residual r that starts as the target's q there (a token repeated
  among them, as the lookup's branch may repeat the draft's, has r = 0 the second time):
  c_j is accepted with probability r(c_j) / sum(r); when rejected, r(c_j) is set to 0
  (each candidate is a point mass, so the residual norm(max(0, r - delta_c)) is r without
  c). The accepted child becomes the current slot; when every child is rejected (or there
  is none) the next token is drawn from r. Token c_j is thus emitted with probability
  q(c_j), and any other token t with probability (1 - sum_j q(c_j)) * q(t) / (1 - sum_j
  q(c_j)) = q(t): the target's q, and along the accepted child the target's q given it.
  The chance that some child is accepted is the target's mass on the children, sum_j q(c_j).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from specsample.core.sampling import argmax_tokens, sample_from_probs


@struct.dataclass
class RowTrees:
  """Each row's tree layout (traced): slots 0..size-1, parents before children."""

  parents: jax.Array  # int32[batch, size]: each slot's parent slot, -1 for the prefix's child
  depths: jax.Array  # int32[batch, size]: position after the prefix's end (prefix's child: 0)
  ancestors: jax.Array  # bool[batch, size, size]: [b, i, j] when j is i or an ancestor of i

  @property
  def size(self) -> int:
    return self.parents.shape[1]

  @classmethod
  def from_parents(cls, parents: jax.Array, max_depth: int) -> RowTrees:
    """The layout of parents int32[batch, size] (every parent an earlier slot or -1),
    whose deepest slot lies at most `max_depth` generations below a child of the prefix."""
    batch, size = parents.shape
    has_parent = parents >= 0  # [batch, size]
    parent = jnp.maximum(parents, 0)
    depths = jnp.zeros((batch, size), jnp.int32)
    own = jnp.broadcast_to(jnp.eye(size, dtype=bool), (batch, size, size))
    ancestors = own
    for _ in range(max_depth):  # static: one generation further up per pass
      above = jnp.take_along_axis(ancestors, parent[:, :, None], axis=1)  # [batch, size, size]
      ancestors = own | (above & has_parent[:, :, None])
      depths = jnp.where(has_parent, jnp.take_along_axis(depths, parent, axis=1) + 1, 0)
    return cls(parents=parents.astype(jnp.int32), depths=depths, ancestors=ancestors)

  def back(self, slots: jax.Array, steps: int) -> jax.Array:
    """The slot `steps` generations above each of slots int32[batch, k], or -m for the
    prefix's m-th last token (as `core.tree.TreeLayout.back`)."""
    for _ in range(steps):
      parent = jnp.take_along_axis(self.parents, jnp.maximum(slots, 0), axis=1)
      slots = jnp.where(slots < 0, slots - 1, jnp.where(parent >= 0, parent, -1))
    return slots

  def path_to(self, slot: jax.Array, length: int) -> jax.Array:
    """The slots of depth 1..length on the way from the root (slot 0) down to slot
    int32[batch] (past its depth: 0).  -> int32[batch, length]."""
    on_path = jnp.take_along_axis(self.ancestors, slot[:, None, None], axis=1)[:, 0]  # [b, size]
    depth = jnp.arange(1, length + 1, dtype=jnp.int32)[None, :, None]  # [1, length, 1]
    at_depth = on_path[:, None, :] & (self.depths[:, None, :] == depth)  # [b, length, size]
    return jnp.argmax(at_depth, axis=-1).astype(jnp.int32)


def child_rank(trees: RowTrees, node: jax.Array) -> tuple[jax.Array, jax.Array]:
  """The children of node int32[batch] -> (is_child bool[batch, size], their rank among
  the node's children in slot order int32[batch, size])."""
  is_child = trees.parents == node[:, None]
  return is_child, jnp.cumsum(is_child, axis=1, dtype=jnp.int32) - 1


def verify_dynamic_greedy(
  tokens: jax.Array, trees: RowTrees, target_scores: jax.Array, max_depth: int
) -> tuple[jax.Array, jax.Array, jax.Array]:
  """The deepest slot reached by the target's argmax from the root.

  tokens int32[batch, size] (slot 0 is the root), target_scores [batch, size, vocab]
  (logits or probabilities at every slot) -> (n: its depth, slot, next_token), int32[batch]
  each. Every matching path is the target's own greedy continuation (two siblings may
  carry the same token, e.g. the lookup's branch and the draft's): the deepest wins, the
  lowest slot on ties.
  """
  argmax = argmax_tokens(target_scores)  # [batch, size]
  parent = jnp.maximum(trees.parents, 0)
  matches = (tokens == jnp.take_along_axis(argmax, parent, axis=1)) & (trees.parents >= 0)
  reached = matches
  for _ in range(max_depth):  # static: a slot is reached when its parent is (or is the root)
    parent_reached = jnp.take_along_axis(reached, parent, axis=1) | (trees.parents == 0)
    reached = matches & parent_reached
  depth = jnp.where(reached, trees.depths, 0)  # [batch, size]
  slot = jnp.argmax(depth, axis=1).astype(jnp.int32)  # slot 0 when nothing matched
  n = jnp.take_along_axis(depth, slot[:, None], axis=1)[:, 0]
  return n, slot, jnp.take_along_axis(argmax, slot[:, None], axis=1)[:, 0]


def verify_dynamic_sampling(
  key: jax.Array,
  tokens: jax.Array,
  trees: RowTrees,
  target_probs: jax.Array,
  max_depth: int,
  max_children: int,
) -> tuple[jax.Array, jax.Array, jax.Array]:
  """Multi-candidate rejection sampling down the tree (the module doc's rule).

  tokens int32[batch, size] (slot 0 is the root), target_probs
  float32[batch, size, vocab] (the processed q after each slot); no slot lies deeper than
  `max_depth` below the root nor has more than `max_children` children.
  -> (n: accepted depth, slot: the last accepted slot (0: none), next_token), int32[batch].
  """
  batch, size, vocab = target_probs.shape
  node = jnp.zeros((batch,), jnp.int32)  # the current slot
  n = jnp.zeros((batch,), jnp.int32)
  done = jnp.zeros((batch,), bool)
  next_token = jnp.zeros((batch,), jnp.int32)
  for step_key in jax.random.split(key, max_depth + 1):  # static: one level per pass
    try_key, draw_key = jax.random.split(step_key)
    u = jax.random.uniform(try_key, (batch, max_children))
    residual = jnp.take_along_axis(target_probs, node[:, None, None], axis=1)[:, 0]  # [b, vocab]
    fallback = residual
    is_child, rank = child_rank(trees, node)
    accepted = jnp.zeros((batch,), bool)
    child = node
    for j in range(max_children):  # static: the j-th child, if any
      at_j = is_child & (rank == j)  # [batch, size]
      exists = jnp.any(at_j, axis=1)
      slot = jnp.argmax(at_j, axis=1).astype(jnp.int32)
      candidate = jnp.take_along_axis(tokens, slot[:, None], axis=1)[:, 0]
      r_c = jnp.take_along_axis(residual, candidate[:, None], axis=1)[:, 0]
      tries = exists & ~accepted
      takes = tries & (u[:, j] * jnp.sum(residual, axis=-1) < r_c)
      rejected = tries & ~takes
      residual = jnp.where(
        rejected[:, None] & (jnp.arange(vocab)[None, :] == candidate[:, None]), 0.0, residual
      )
      child = jnp.where(takes, slot, child)
      accepted |= takes
    has_mass = jnp.sum(residual, axis=-1, keepdims=True) > 0  # empty only through rounding
    drawn = sample_from_probs(draw_key, jnp.where(has_mass, residual, fallback))
    next_token = jnp.where(~done & ~accepted, drawn, next_token)
    n = jnp.where(~done & accepted, n + 1, n)
    node = jnp.where(~done & accepted, child, node)
    done |= ~accepted
  return n, node, next_token
