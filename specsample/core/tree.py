"""Multi-draft (tree) verification: K draft continuations scored in one target call.

Layout. The draft proposes K chains of gamma tokens that share only the committed
prefix: chain j is x^j_1..x^j_gamma. The target scores the root (the pending token) and
all K * gamma chain tokens in ONE call, each token attending to the committed prefix, the
root and the earlier tokens of its own chain (`TreeLayout`, the static shape of that
attention). The accepted path is a prefix of one chain; the caches keep only it.

Rules:
- `verify_tree_sampling`: recursive rejection sampling over the chains' first tokens,
  drawn without replacement from the draft (Jeon et al. 2024, "Recursive Speculative
  Decoding"; the multi-round rule of SpecInfer, Miao et al. 2023, with replacement), then
  token-wise verification along the accepted chain.
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
from specsample.core.verification import verify_tokenwise


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
  """Recursive rejection sampling over K chains with distinct first tokens.

  The chains' first tokens c_1..c_K are draws WITHOUT replacement from p_1 (Gumbel top-K),
  so c_k given c_1..c_{k-1} follows p_1 restricted to the unseen tokens, renormalised:
  p^k. With r^1 = q_1: accept c_k with probability min(1, r^k(c_k) / p^k(c_k)), else
  r^{k+1} = norm(max(0, r^k - p^k)) and try the next; when all are rejected, the next
  token is drawn from the last residual. (Drawing with replacement would waste chains
  on repeats of the draft's favourite, which a residual never accepts twice.) The
  accepted chain then continues alone, verified token-wise (core.verification) with
  its own p and q. Candidates past the end of p_1's support (fewer than K tokens with
  p_1 > 0) are never tried.

  Args:
    chain_tokens: int32[batch, K, gamma], x^j_1..x^j_gamma.
    draft_probs: float32[batch, K, gamma, vocab], p along each chain (p_1 is shared).
    target_probs: float32[batch, K, gamma + 1, vocab], q along each chain (q_1 shared).

  Returns:
    (n int32[batch] accepted tokens, chain int32[batch] whose first n tokens they are,
    next_token int32[batch]).
  """
  batch, num_chains, gamma = chain_tokens.shape
  first_key, rest_key, sample_key = jax.random.split(key, 3)
  u = jax.random.uniform(first_key, (batch, num_chains))
  unseen = draft_probs[:, 0, 0]  # [batch, vocab]: p_1's mass on tokens not yet tried
  residual = target_probs[:, 0, 0]  # [batch, vocab]: r^1 = q_1
  accepted = jnp.zeros((batch,), bool)
  chain = jnp.zeros((batch,), jnp.int32)
  for k in range(num_chains):  # static
    candidate = chain_tokens[:, k, 0]  # [batch]
    mass = jnp.sum(unseen, axis=-1, keepdims=True)  # [batch, 1]
    p_k = unseen / jnp.where(mass > 0, mass, 1.0)  # p^k
    p_x = jnp.take_along_axis(p_k, candidate[:, None], axis=1)[:, 0]
    r_x = jnp.take_along_axis(residual, candidate[:, None], axis=1)[:, 0]
    tries = ~accepted & (p_x > 0)
    takes = tries & (u[:, k] * p_x < r_x)
    rest = jnp.maximum(residual - p_k, 0.0)
    rest_mass = jnp.sum(rest, axis=-1, keepdims=True)
    rest = jnp.where(rest_mass > 0, rest / jnp.where(rest_mass > 0, rest_mass, 1.0), residual)
    residual = jnp.where((tries & ~takes)[:, None], rest, residual)
    chain = jnp.where(takes, k, chain)
    accepted |= takes
    unseen = unseen * (jnp.arange(unseen.shape[-1])[None, :] != candidate[:, None])

  # The accepted chain's x_2..x_gamma, token-wise.  [batch, gamma - 1] and [..., vocab]
  tokens = _at_chain(chain_tokens, chain)[:, 1:]
  p_rest = _at_chain(draft_probs, chain)[:, 1:]
  q_rest = _at_chain(target_probs, chain)[:, 1:]
  if gamma > 1:
    more, follow = verify_tokenwise(rest_key, tokens, p_rest, q_rest)
  else:  # the chain is one token long: the bonus token follows it
    more, follow = jnp.zeros((batch,), jnp.int32), sample_from_probs(rest_key, q_rest[:, 0])
  n = jnp.where(accepted, 1 + more, 0)
  next_token = jnp.where(accepted, follow, sample_from_probs(sample_key, residual))
  return n, chain, next_token


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
