"""The speculative loop's counters: acceptance statistics and bad-logits flags, updated
once per iteration in one place (`LoopCounters.record`).

The statistics describe the tokens the output kept. An iteration accepts n draft tokens
x_1..x_n and adds y: n + 1 tokens, of which the commit keeps k (fewer when the row
reaches max_new_tokens, or EOS among x_1..x_n: then the kept ones are x_1..x_k). The
iteration counts min(n, k) accepted draft tokens (in `accepted` and the histogram), a
rejection only when y was kept (k = n + 1) and corrects a rejected draft token, and k
kept tokens (`kept`, for tokens per target call). Accepted draft tokens past the cut are
not counted, nor a rejection past it: the counts stop where the output stops, as if the
run had been watched token by token until then.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from specsample.decoding.outputs import DecodingStats


@struct.dataclass(kw_only=True)
class LoopCounters:
  """What the loop counts besides the output: the statistics and the bad-logits flags."""

  target_calls: jax.Array  # int32[]: loop iterations = batched target calls
  draft_calls: jax.Array  # int32[]: batched draft steps (catch-ups included)
  drafted: jax.Array  # int32[batch]: draft tokens proposed (counted iterations)
  iterations: jax.Array  # int32[batch]: iterations each row took part in (and counted)
  accepted: jax.Array  # int32[batch]: accepted draft tokens the output kept
  rejected: jax.Array  # int32[batch]: iterations that kept a correction of a rejected token
  accepted_histogram: jax.Array  # int32[gamma + 1]: row-iterations with n counted accepted
  kept: jax.Array  # int32[batch]: tokens the output kept (counted iterations)
  target_nonfinite: jax.Array  # bool[batch]: the target's logits went bad in this row
  draft_nonfinite: jax.Array  # bool[batch]: the draft's did

  @classmethod
  def zeros(cls, batch: int, gamma: int) -> LoopCounters:
    zeros, flags = jnp.zeros((batch,), jnp.int32), jnp.zeros((batch,), bool)
    return cls(
      target_calls=jnp.zeros((), jnp.int32), draft_calls=jnp.zeros((), jnp.int32),
      drafted=zeros, iterations=zeros, accepted=zeros, rejected=zeros,
      accepted_histogram=jnp.zeros((gamma + 1,), jnp.int32), kept=zeros,
      target_nonfinite=flags, draft_nonfinite=flags,
    )  # fmt: skip

  def record(
    self,
    *,
    active: jax.Array,
    n: jax.Array,
    kept: jax.Array,
    target_bad: jax.Array,
    draft_bad: jax.Array,
    num_drafted: jax.Array | None = None,
    draft_steps: jax.Array | int | None = None,
    num_proposed: jax.Array | None = None,
  ) -> LoopCounters:
    """One iteration: n int32[batch] accepted of a path of num_drafted int32[batch] draft
    tokens (gamma when None), out of num_proposed (a tree's K chains; num_drafted when
    None), in draft_steps batched draft calls (gamma when None), of whose n + 1 tokens
    the commit kept `kept` int32[batch]; counts min(n, kept) accepted (see the module
    docstring); rows with bad logits are flagged, not counted."""
    gamma = self.accepted_histogram.shape[0] - 1
    num_drafted = jnp.full_like(n, gamma) if num_drafted is None else num_drafted
    num_proposed = num_drafted if num_proposed is None else num_proposed
    draft_steps = gamma if draft_steps is None else draft_steps
    counted = active & ~(target_bad | draft_bad)  # [batch]
    whole = kept > n  # y kept too: the iteration was not cut
    n = jnp.minimum(n, kept)  # the accepted draft tokens the output kept
    one_hot = jax.nn.one_hot(n, gamma + 1, dtype=jnp.int32) * counted[:, None]  # [batch, gamma+1]
    return LoopCounters(
      target_calls=self.target_calls + 1,
      draft_calls=self.draft_calls + draft_steps,
      drafted=self.drafted + jnp.where(counted, num_proposed, 0),
      iterations=self.iterations + counted,
      accepted=self.accepted + jnp.where(counted, n, 0),
      rejected=self.rejected + (counted & whole & (n < num_drafted)),
      accepted_histogram=self.accepted_histogram + jnp.sum(one_hot, axis=0),
      kept=self.kept + jnp.where(counted, kept, 0),
      target_nonfinite=self.target_nonfinite | target_bad,
      draft_nonfinite=self.draft_nonfinite | draft_bad,
    )

  def stats(self) -> DecodingStats:
    return DecodingStats(
      target_calls=self.target_calls,
      draft_calls=self.draft_calls,
      iterations=self.iterations,
      drafted=self.drafted,
      accepted=self.accepted,
      rejected=self.rejected,
      accepted_histogram=self.accepted_histogram,
      kept=self.kept,
    )
