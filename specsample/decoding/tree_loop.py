"""One speculative iteration with K draft chains verified as a token tree (core.tree).

  1. Draft: catch up, then K chains of gamma tokens with distinct first tokens: sampling
     draws the K first tokens from p_1 without replacement (Gumbel top-K), then each
     chain on its own; greedy takes the draft's top-K first tokens and continues each
     greedily (chain 0 is the plain greedy draft).
     The draft runs each depth as ONE tree-shaped call over the K chains' tokens.
  2. Target: ONE tree-shaped call over [last, all K * gamma chain tokens].
  3. Verify: recursive rejection sampling over the first tokens, then token-wise along
     the accepted chain (greedy: the longest matching chain), giving n, the chain the
     accepted path follows, and y.
  4. Commit x^chain_1..x^chain_n, y.
  5. Both caches keep only the accepted path (`keep_path`: its entries move to the end).

Models need `extend_tree` and `keep_path` besides the contract (T5, DecoderOnly, MarkovLM).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from specsample.core.sampling import (
  SamplingConfig,
  argmax_tokens,
  logits_to_probs,
  nonfinite_logits,
  sample_from_probs,
)
from specsample.core.tree import TreeLayout, chain_slots, verify_tree_greedy, verify_tree_sampling
from specsample.decoding.drafting import catch_up
from specsample.decoding.iteration import bad_logits_used, finish_iteration

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


def supports_trees(model) -> bool:
  return callable(getattr(model, "extend_tree", None)) and callable(
    getattr(model, "keep_path", None)
  )


def new_positions(gamma: int, tree: DraftTree) -> int:
  """Cache positions one tree iteration writes past a row's end (root + chains)."""
  return tree.num_chains * gamma + 1


def _draft_chains(draft, s, active, key, *, gamma: int, num_chains: int, sampling: SamplingConfig):
  """Step 1. -> chain tokens int32[batch, K, gamma], p float32[batch, K, gamma, vocab] (None
  when greedy), bad bool[batch, K, gamma], the draft's state (x_1..x_{gamma-1} of every
  chain written as tree slots past its end)."""
  first_logits, draft_state = catch_up(
    draft, s.draft_state, s.draft_pending, jnp.where(active, s.draft_num_pending, 0)
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
    logits, draft_state = draft.extend_tree(
      draft_state, chains[-1], layout, (depth - 1) * num_chains
    )  # [batch, K, vocab]
    if sampling.is_greedy:
      chains.append(argmax_tokens(logits))
    else:
      probs.append(logits_to_probs(logits, sampling))
      chains.append(sample_from_probs(keys[depth], probs[-1]))
    bad.append(nonfinite_logits(logits))
  draft_probs = None if sampling.is_greedy else jnp.stack(probs, axis=2)
  return jnp.stack(chains, axis=2), draft_probs, jnp.stack(bad, axis=2), draft_state


def _along(values: jax.Array, chain: jax.Array) -> jax.Array:
  """values[b, chain[b]].  [batch, K, ...] -> [batch, ...]."""
  index = chain.reshape((-1,) + (1,) * (values.ndim - 1))
  return jnp.take_along_axis(values, index, axis=1)[:, 0]


def tree_iteration(target, draft, s, settings):
  """One iteration of the loop in `speculative._speculative_loop` with settings.tree."""
  gamma, num_chains, sampling = settings.gamma, settings.tree.num_chains, settings.sampling
  key, draft_key, verify_key = jax.random.split(s.key, 3)
  active = ~s.done  # [batch]
  batch = active.shape[0]

  # 1. Draft K chains.  x: [batch, K, gamma]
  x, p, draft_bad, draft_state = _draft_chains(
    draft, s, active, draft_key, gamma=gamma, num_chains=num_chains, sampling=sampling
  )

  # 2. ONE target call over [last, chain tokens depth-major].  along: [batch, K, gamma + 1, vocab]
  tokens = jnp.concatenate([s.last_token[:, None], x.transpose(0, 2, 1).reshape(batch, -1)], 1)
  layout = TreeLayout.chains(num_chains, gamma, root=True)
  logits, target_state = target.extend_tree(s.target_state, tokens, layout, 0)
  slots = chain_slots(num_chains, gamma)  # [K, gamma + 1], static
  along = logits[:, slots]

  # 3. Verify.  n, chain, y: [batch] each
  if sampling.is_greedy:
    n, chain, y = verify_tree_greedy(x, along)
  else:
    n, chain, y = verify_tree_sampling(verify_key, x, p, logits_to_probs(along, sampling))
  x_chain = _along(x, chain)  # [batch, gamma]: the path the verdict followed
  target_bad, draft_bad = bad_logits_used(_along(along, chain), _along(draft_bad, chain), n, active)

  # 4.-5. Commit x^chain_1..x^chain_n, y, and keep the accepted path: the target keeps
  #    last, x_1..x_n; the draft saw x_1..x_{gamma-1} of every chain and keeps the
  #    chain's x_1..x_min(n, gamma-1).
  target_slots = jnp.asarray(slots)[chain]  # [batch, gamma + 1]
  target_state = target.keep_path(target_state, target_slots, jnp.where(active, n + 1, 0))
  if gamma > 1:
    depth_offsets = jnp.asarray(np.arange(gamma - 1, dtype=np.int32) * num_chains)
    draft_slots = depth_offsets[None, :] + chain[:, None]  # [batch, gamma - 1]
    kept = jnp.where(active, jnp.minimum(n, gamma - 1), 0)
    draft_state = draft.keep_path(draft_state, draft_slots, kept)
  counters = s.counters.record(
    active=active,
    n=n,
    target_bad=target_bad,
    draft_bad=draft_bad,
    num_proposed=jnp.full((batch,), num_chains * gamma, jnp.int32),
  )
  return finish_iteration(
    s,
    active=active,
    x=x_chain,
    m=jnp.full((batch,), gamma, jnp.int32),
    n=n,
    y=y,
    target_bad=target_bad,
    draft_bad=draft_bad,
    eos_id=target.eos_id,
    pad_id=target.pad_id,
    target_state=target_state,
    draft_state=draft_state,
    key=key,
    counters=counters,
  )
