"""K draft chains verified as a token tree (core.tree), as a drafter.

  1. Draft: catch up, then K chains of gamma tokens with distinct first tokens: sampling
     draws the K first tokens from p_1 without replacement (Gumbel top-K), then each
     chain on its own; greedy takes the draft's top-K first tokens and continues each
     greedily (chain 0 is the plain greedy draft).
     The draft runs each depth as ONE tree-shaped call over the K chains' tokens.
  2. Target: ONE tree-shaped call over [last, all K * gamma chain tokens].
  3. Verify: recursive rejection sampling over the first tokens, then token-wise along
     the accepted chain (greedy: the longest matching chain), giving n, the chain the
     accepted path follows, and y.
  5. Both caches keep only the accepted path (`keep_path`: its entries move to the end).

Models need `extend_tree` and `keep_path` besides the contract (T5, DecoderOnly, MarkovLM).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from specsample.core.contract import supports_trees  # noqa: F401 - re-exported
from specsample.core.sampling import (
  argmax_tokens,
  logits_to_probs,
  nonfinite_logits,
  sample_from_probs,
)
from specsample.core.tree import TreeLayout, chain_slots, verify_tree_greedy, verify_tree_sampling
from specsample.decoding.drafters.base import (
  Proposal,
  Scored,
  Verdict,
  bad_logits_used,
  pending_after,
)
from specsample.decoding.drafters.chain import ChainDrafter, ChainState, catch_up

MAX_CHAINS = 16


@dataclasses.dataclass(frozen=True)
class DraftTree:
  """Static settings of multi-draft decoding: `num_chains` draft continuations of gamma
  tokens each per row and iteration, verified together in one target call."""

  num_chains: int = 2

  def __post_init__(self):
    k = self.num_chains
    if isinstance(k, bool) or not isinstance(k, int) or not 2 <= k <= MAX_CHAINS:
      raise ValueError(f"DraftTree.num_chains must be an int in 2..{MAX_CHAINS}, got {k!r}")


def _along(values: jax.Array, chain: jax.Array) -> jax.Array:
  """values[b, chain[b]].  [batch, K, ...] -> [batch, ...]."""
  index = chain.reshape((-1,) + (1,) * (values.ndim - 1))
  return jnp.take_along_axis(values, index, axis=1)[:, 0]


@dataclasses.dataclass(frozen=True, eq=False)
class TreeDrafter(ChainDrafter):
  """K chains of gamma tokens per row; a proposal's tokens are [batch, K, gamma]."""

  tree: DraftTree = DraftTree()

  def cache_positions(self, max_new_tokens: int) -> int:
    return max_new_tokens + self.tree.num_chains * self.gamma + 1  # root + chains

  def propose(self, state: ChainState, active, key) -> Proposal:
    """-> tokens int32[batch, K, gamma], probs float32[batch, K, gamma, vocab] (None when
    greedy), bad bool[batch, K, gamma], the draft's state (x_1..x_{gamma-1} of every chain
    written as tree slots past its end)."""
    gamma, num_chains, sampling = self.gamma, self.tree.num_chains, self.sampling
    first_logits, draft_state = catch_up(
      self.draft, state.model_state, state.pending, jnp.where(active, state.num_pending, 0)
    )  # [batch, vocab]
    batch, vocab = first_logits.shape
    keys = jax.random.split(key, gamma)
    layout = TreeLayout.chains(num_chains, gamma - 1, root=False)
    if sampling.is_greedy:
      tokens = jax.lax.top_k(first_logits, num_chains)[1].astype(jnp.int32)  # [batch, K]
      probs = [None]
    else:
      probs_1 = logits_to_probs(first_logits, sampling)  # [batch, vocab]
      # K draws without replacement: the top K of log p + Gumbel noise (Gumbel top-k).
      noisy = jnp.where(
        probs_1 > 0, jnp.log(probs_1) + jax.random.gumbel(keys[0], probs_1.shape), -jnp.inf
      )
      tokens = jax.lax.top_k(noisy, num_chains)[1].astype(jnp.int32)  # [batch, K], distinct
      probs = [jnp.broadcast_to(probs_1[:, None], (batch, num_chains, vocab))]
    chains = [tokens]
    bad = [jnp.broadcast_to(nonfinite_logits(first_logits)[:, None], (batch, num_chains))]
    for depth in range(1, gamma):  # static: one K-token tree call per depth
      logits, draft_state = self.draft.extend_tree(
        draft_state, chains[-1], layout, (depth - 1) * num_chains
      )  # [batch, K, vocab]
      if sampling.is_greedy:
        chains.append(argmax_tokens(logits))
      else:
        probs.append(logits_to_probs(logits, sampling))
        chains.append(sample_from_probs(keys[depth], probs[-1]))
      bad.append(nonfinite_logits(logits))
    return Proposal(
      tokens=jnp.stack(chains, axis=2),
      probs=None if sampling.is_greedy else jnp.stack(probs, axis=2),
      bad=jnp.stack(bad, axis=2),
      num_drafted=None,
      steps=gamma,
      model_state=draft_state,
    )

  def score(self, target, target_state, last_token, proposal: Proposal, active) -> Scored:
    """ONE target call over [last, chain tokens depth-major] -> logits [batch, 1 + K *
    gamma, vocab] in tree order."""
    x = proposal.tokens  # [batch, K, gamma]
    batch = x.shape[0]
    tokens = jnp.concatenate([last_token[:, None], x.transpose(0, 2, 1).reshape(batch, -1)], 1)
    layout = TreeLayout.chains(self.tree.num_chains, self.gamma, root=True)
    logits, target_state = target.extend_tree(target_state, tokens, layout, 0)
    return Scored(logits=logits, target_state=target_state)

  def verify(self, key, proposal: Proposal, scored: Scored, active) -> Verdict:
    x, num_chains = proposal.tokens, self.tree.num_chains
    along = scored.logits[:, chain_slots(num_chains, self.gamma)]  # [batch, K, gamma + 1, vocab]
    if self.sampling.is_greedy:
      n, chain, y = verify_tree_greedy(x, along)
    else:
      q = logits_to_probs(along, self.sampling)
      n, chain, y = verify_tree_sampling(key, x, proposal.probs, q)
    target_bad, draft_bad = bad_logits_used(
      _along(along, chain), _along(proposal.bad, chain), n, active
    )
    return Verdict(
      n=n,
      y=y,
      path=_along(x, chain),  # [batch, gamma]: the path the verdict followed
      num_drafted=jnp.full_like(n, self.gamma),
      target_bad=target_bad,
      draft_bad=draft_bad,
      num_proposed=jnp.full_like(n, num_chains * self.gamma),
      chosen=chain,
    )

  def advance(self, state: ChainState, target, target_state, proposal, scored, verdict, active):
    """The target keeps last, x^chain_1..x^chain_n; the draft saw x_1..x_{gamma-1} of
    every chain and keeps the chain's x_1..x_min(n, gamma-1)."""
    gamma, num_chains, n = self.gamma, self.tree.num_chains, verdict.n
    target_slots = jnp.asarray(chain_slots(num_chains, gamma))[verdict.chosen]  # [batch, gamma + 1]
    target_state = target.keep_path(scored.target_state, target_slots, jnp.where(active, n + 1, 0))
    model_state = proposal.model_state
    if gamma > 1:
      depth_offsets = jnp.asarray(np.arange(gamma - 1, dtype=np.int32) * num_chains)
      draft_slots = depth_offsets[None, :] + verdict.chosen[:, None]  # [batch, gamma - 1]
      kept = jnp.where(active, jnp.minimum(n, gamma - 1), 0)
      model_state = self.draft.keep_path(model_state, draft_slots, kept)
    pending, num_pending = pending_after(verdict, target.pad_id)
    return target_state, state.replace(
      model_state=model_state,
      pending=jnp.where(active[:, None], pending, state.pending),
      num_pending=jnp.where(active, num_pending, state.num_pending),
    )
