"""Multi-draft (tree) verification: K draft continuations scored in one target call.

Layout. The draft proposes K chains of gamma tokens that share only the committed
prefix: chain j is x^j_1..x^j_gamma. The target scores the root (the pending token) and
all K * gamma chain tokens in ONE call, each token attending to the committed prefix, the
root and the earlier tokens of its own chain (`TreeLayout`, the static shape of that
attention). The accepted path is a prefix of one chain; the caches keep only it.

Rules:
- `verify_tree_sampling`: recursive rejection sampling over the chains' children, for
  K i.i.d. draft chains (SpecInfer's multi-round rule, Miao et al. 2023; the
  with-replacement case of Jeon et al. 2024's recursive speculative decoding). At a node
  with candidate children c_1..c_A (the next tokens of the chains still on the accepted
  path, i.i.d. from p): accept c_k with probability min(1, r(c_k) / p(c_k)), with r = q at
  the first candidate and r <- norm(max(0, r - p)) after each rejection; when all are
  rejected the next token is drawn from r. After an acceptance, the chains whose token at
  this depth equals the accepted one are the next node's candidates (their next tokens
  are again i.i.d. from p given the path, whatever happened to other chains).
- `verify_tree_greedy`: temperature 0; the chain with the longest prefix equal to the
  target's argmax along it (lowest index on ties), then the argmax after it.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from specsample.core.sampling import argmax_tokens, sample_from_probs


@dataclasses.dataclass(frozen=True)
class TreeLayout:
  """The static shape of tree-shaped new positions: slot i's parent is parents[i] (an
  earlier slot), or -1 for a child of the committed prefix."""

  parents: tuple[int, ...]

  def __post_init__(self):
    for slot, parent in enumerate(self.parents):
      if not -1 <= parent < slot:
        raise ValueError(f"slot {slot}'s parent {parent} must be -1 or an earlier slot")

  @property
  def size(self) -> int:
    return len(self.parents)

  @functools.cached_property
  def depths(self) -> np.ndarray:
    """int32[size]: position of each slot after the prefix's end (children of -1: 0)."""
    depths = np.zeros(self.size, np.int32)
    for slot, parent in enumerate(self.parents):
      depths[slot] = 0 if parent < 0 else depths[parent] + 1
    return depths

  @functools.cached_property
  def ancestors(self) -> np.ndarray:
    """bool[size, size]: [i, j] when slot j is slot i or one of its ancestors."""
    ancestors = np.eye(self.size, dtype=bool)
    for slot, parent in enumerate(self.parents):
      if parent >= 0:
        ancestors[slot] |= ancestors[parent]
    return ancestors

  def back(self, slot: int, steps: int) -> int:
    """The slot `steps` generations above `slot`, or -m for the prefix's m-th last token."""
    for _ in range(steps):
      if slot < 0:
        slot -= 1
      else:
        slot = self.parents[slot] if self.parents[slot] >= 0 else -1
    return slot

  @classmethod
  def chains(cls, num_chains: int, depth: int, *, root: bool) -> TreeLayout:
    """`num_chains` chains of `depth` tokens, depth-major: the token at depth d (1-based)
    of chain j is slot (d - 1) * num_chains + j (+ 1 after a root slot 0, which the chains
    then hang from)."""
    offset = 1 if root else 0
    parents = [-1] if root else []
    for d in range(1, depth + 1):
      for j in range(num_chains):
        if d == 1:
          parents.append(0 if root else -1)
        else:
          parents.append(offset + (d - 2) * num_chains + j)
    return cls(tuple(parents))


def chain_slots(num_chains: int, depth: int) -> np.ndarray:
  """int32[num_chains, depth + 1]: the slots of each chain in `TreeLayout.chains(...,
  root=True)`, from the root (slot 0) to its token at `depth`."""
  slots = np.zeros((num_chains, depth + 1), np.int32)
  for j in range(num_chains):
    for d in range(1, depth + 1):
      slots[j, d] = 1 + (d - 1) * num_chains + j
  return slots


def _first_true(mask: jax.Array) -> jax.Array:
  """Index of the first True along the last axis (0 if none).  bool[..., n] -> int32[...]."""
  return jnp.argmax(mask, axis=-1).astype(jnp.int32)


def _at_chain(values: jax.Array, chain: jax.Array) -> jax.Array:
  """values[b, chain[b]].  [batch, K, ...], int32[batch] -> [batch, ...]."""
  index = chain.reshape((-1,) + (1,) * (values.ndim - 1))
  return jnp.take_along_axis(values, index, axis=1)[:, 0]


def verify_tree_sampling(
  key: jax.Array, chain_tokens: jax.Array, draft_probs: jax.Array, target_probs: jax.Array
) -> tuple[jax.Array, jax.Array, jax.Array]:
  """Recursive rejection sampling over K i.i.d. draft chains.

  Args:
    chain_tokens: int32[batch, K, gamma], x^j_1..x^j_gamma.
    draft_probs: float32[batch, K, gamma, vocab], p along each chain (p_1 is shared).
    target_probs: float32[batch, K, gamma + 1, vocab], q along each chain (q_1 shared).

  Returns:
    (n int32[batch] accepted tokens, chain int32[batch] whose first n tokens they are,
    next_token int32[batch]).
  """
  batch, num_chains, gamma = chain_tokens.shape
  accept_key, sample_key = jax.random.split(key)
  u = jax.random.uniform(accept_key, (batch, gamma, num_chains))
  alive = jnp.ones((batch, num_chains), bool)  # chains on the accepted path
  stopped = jnp.zeros((batch,), bool)  # a node rejected every candidate
  n = jnp.zeros((batch,), jnp.int32)
  final = target_probs[:, 0, 0]  # [batch, vocab]: what the next token is drawn from
  for d in range(gamma):  # static
    first = _first_true(alive)
    p = _at_chain(draft_probs[:, :, d], first)  # [batch, vocab]: the node's draft distribution
    residual = _at_chain(target_probs[:, :, d], first)  # [batch, vocab], starts at q
    accepted = jnp.zeros((batch,), bool)
    token = jnp.zeros((batch,), jnp.int32)
    for k in range(num_chains):  # static
      candidate = chain_tokens[:, k, d]
      tries = alive[:, k] & ~accepted & ~stopped
      p_x = jnp.take_along_axis(p, candidate[:, None], axis=1)[:, 0]
      r_x = jnp.take_along_axis(residual, candidate[:, None], axis=1)[:, 0]
      takes = tries & (u[:, d, k] * p_x < r_x)  # P = min(1, r(x) / p(x))
      rejects = tries & ~takes
      rest = jnp.maximum(residual - p, 0.0)
      mass = jnp.sum(rest, axis=-1, keepdims=True)
      rest = jnp.where(mass > 0, rest / jnp.where(mass > 0, mass, 1.0), residual)
      residual = jnp.where(rejects[:, None], rest, residual)
      token = jnp.where(takes, candidate, token)
      accepted |= takes
    node_open = ~stopped
    final = jnp.where((node_open & ~accepted)[:, None], residual, final)
    stopped |= node_open & ~accepted
    n = n + (node_open & accepted)
    alive = jnp.where(
      (node_open & accepted)[:, None], alive & (chain_tokens[:, :, d] == token[:, None]), alive
    )
  chain = _first_true(alive)
  bonus = _at_chain(target_probs[:, :, gamma], chain)
  final = jnp.where(stopped[:, None], final, bonus)
  return n, chain, sample_from_probs(sample_key, final)


def verify_tree_greedy(
  chain_tokens: jax.Array, target_scores: jax.Array
) -> tuple[jax.Array, jax.Array, jax.Array]:
  """The chain whose longest prefix matches the target's argmax along it.

  chain_tokens int32[batch, K, gamma], target_scores [batch, K, gamma + 1, vocab]
  (probabilities or logits) -> (n, chain, next_token), int32[batch] each.
  """
  gamma = chain_tokens.shape[2]
  argmax = argmax_tokens(target_scores)  # [batch, K, gamma + 1]
  matches = chain_tokens == argmax[:, :, :gamma]
  lengths = jnp.sum(jnp.cumprod(matches, axis=2), axis=2).astype(jnp.int32)  # [batch, K]
  chain = jnp.argmax(lengths, axis=1).astype(jnp.int32)  # lowest index on ties
  n = _at_chain(lengths, chain)
  next_token = jnp.take_along_axis(_at_chain(argmax, chain), n[:, None], axis=1)[:, 0]
  return n, chain, next_token
