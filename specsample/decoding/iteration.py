"""The end of one speculative iteration, shared by the chain loop (decoding.speculative)
and the tree loop (decoding.tree_loop): which rows used bad logits, the commit of
x_1..x_n, y, the draft's pending tokens, the trace, and the next loop state."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from specsample.core.sampling import nonfinite_logits
from specsample.decoding.commit import commit


def bad_logits_used(
  target_logits: jax.Array, draft_bad: jax.Array, n: jax.Array, active: jax.Array
) -> tuple[jax.Array, jax.Array]:
  """Rows whose verdict used NaN/inf logits: q_1..q_{n+1} and p_1..p_{n+1} (later
  positions were never looked at).  target_logits [batch, gamma + 1, vocab], draft_bad
  bool[batch, gamma] -> (target_bad, draft_bad), bool[batch] each."""
  gamma = draft_bad.shape[1]
  offsets = jnp.arange(gamma + 1, dtype=jnp.int32)[None, :]  # [1, gamma + 1]
  used = (offsets <= n[:, None]) & active[:, None]  # [batch, gamma + 1]
  target_bad = jnp.any(nonfinite_logits(target_logits) & used, axis=1)
  return target_bad, jnp.any(draft_bad & used[:, :gamma], axis=1)


def finish_iteration(
  s,
  *,
  active: jax.Array,
  x: jax.Array,
  m: jax.Array,
  n: jax.Array,
  y: jax.Array,
  target_bad: jax.Array,
  draft_bad: jax.Array,
  eos_id,
  pad_id: int,
  pending_features: jax.Array | None = None,
  **fields,
):
  """Steps 4 and 5's bookkeeping: commits x_1..x_n, y (rows with bad logits commit
  nothing and stop), sets the draft's pending tokens (y, and x_m when all m proposed
  tokens were accepted), records the trace, and returns `s` with those and `fields`
  (the models' states, key, counters, ...) replaced.

  x int32[batch, gamma] the proposed path (past m: padding), m int32[batch] its length,
  n int32[batch] accepted, y int32[batch] the next token. pending_features [batch,
  gamma + 1, d]: for a feature draft, the target's features of [last, x_1..x_gamma]; its
  pending tokens are then x_1..x_n, y (it was rewound to before x_1), each with the
  feature before it.
  """
  gamma = x.shape[1]
  offsets = jnp.arange(gamma + 1, dtype=jnp.int32)[None, :]  # [1, gamma + 1]
  x_then_y = jnp.where(offsets == n[:, None], y[:, None], jnp.pad(x, ((0, 0), (0, 1))))
  stopped = s.done | target_bad | draft_bad
  tokens, lengths, done = commit(s.tokens, s.lengths, stopped, x_then_y, n + 1, eos_id=eos_id)

  all_accepted = n == m
  if pending_features is None:
    x_m = jnp.take_along_axis(x, (m - 1)[:, None], axis=1)[:, 0]
    pending_if_all = jnp.stack([x_m, y], axis=1)
    pending_if_not = jnp.stack([y, jnp.full_like(y, pad_id)], axis=1)
    new_pending = jnp.where(all_accepted[:, None], pending_if_all, pending_if_not)
    num_pending = jnp.where(all_accepted, 2, 1)
  else:  # [batch, gamma + 1] tokens with [batch, gamma + 1, d] features
    new_pending, num_pending = x_then_y, n + 1
    fields["draft_pending_features"] = jnp.where(
      active[:, None, None], pending_features, s.draft_pending_features
    )

  trace = s.trace
  if trace is not None:
    i = s.counters.target_calls
    trace = trace.replace(
      drafts=trace.drafts.at[i].set(x),
      drafted=trace.drafted.at[i].set(m),
      accepted=trace.accepted.at[i].set(n),
      next_token=trace.next_token.at[i].set(y),
      active=trace.active.at[i].set(active & ~(target_bad | draft_bad)),
    )
  return s.replace(
    last_token=jnp.where(active, y, s.last_token),
    draft_pending=jnp.where(active[:, None], new_pending, s.draft_pending),
    draft_num_pending=jnp.where(active, num_pending, s.draft_num_pending),
    tokens=tokens,
    lengths=lengths,
    done=done,
    trace=trace,
    **fields,
  )
