"""What a drafter is: the object the speculative loop asks for steps 1, 2, 3 and 5.

One speculative iteration (decoding.speculative) is the paper's five steps:

  1. `propose`: the drafter's draft tokens (a chain of up to gamma, or a tree).
  2. `score`: ONE target call over [last, the proposal] (a chain call, or a tree call).
  3. `verify`: n accepted tokens of the proposal, the next token y, and the path they
     lie on (x_1..x_gamma, for the commit and the trace).
  4. commit x_1..x_n, y (the loop: the same for every drafter).
  5. `advance`: both caches keep the committed prefix (rewinds, or a tree's kept path)
     and the drafter notes what its draft still owes (pending tokens, features, ...).

A drafter is built at trace time from static settings and the draft model
(`DraftShape.drafter`), and keeps whatever it carries between iterations in a state
struct of its own (`init` makes it); the loop's state holds only what every drafter
needs. Adding a draft shape (a dynamic tree, say) is a new DraftShape and Drafter; the
loop does not change.
"""

from __future__ import annotations

from typing import Any, Protocol

import jax
import jax.numpy as jnp
from flax import struct

from specsample.core.sampling import SamplingConfig, logits_to_probs, nonfinite_logits
from specsample.core.verification import VerificationRule, verify, verify_greedy


@struct.dataclass(kw_only=True)
class Proposal:
  """Step 1's result. A chain proposal: tokens [batch, gamma], probs [batch, gamma, vocab]
  (None when greedy verification needs none), bad [batch, gamma]. A drafter with another
  shape (a tree) keeps its own layout in these fields and reads them back in `score` /
  `verify`; the loop never looks inside."""

  tokens: jax.Array  # int32[batch, ...]: the draft tokens
  probs: jax.Array | None  # float32[batch, ..., vocab]: the draft's p for each
  bad: jax.Array  # bool[batch, ...]: unusable logits behind each p
  num_drafted: jax.Array | None  # int32[batch] in 1..gamma (a chain's m); None: all gamma
  steps: jax.Array | int  # batched draft calls made (catch-ups included)
  model_state: Any  # the draft model's state after drafting


@struct.dataclass(kw_only=True)
class Scored:
  """Step 2's result: the target's logits for every proposed position (a chain's
  [batch, gamma + 1, vocab]) and its state; features [batch, gamma + 1, d] for feature
  drafts (None otherwise)."""

  logits: jax.Array
  target_state: Any
  features: jax.Array | None = None


@struct.dataclass(kw_only=True)
class Verdict:
  """Step 3's result, along the path the verdict followed."""

  n: jax.Array  # int32[batch]: accepted draft tokens
  y: jax.Array  # int32[batch]: the next token (resampled, or the bonus token)
  path: jax.Array  # int32[batch, gamma]: x_1..x_gamma of that path (past m: padding)
  num_drafted: jax.Array  # int32[batch]: m, the path's drafted length
  target_bad: jax.Array  # bool[batch]: the verdict used NaN/inf target logits
  draft_bad: jax.Array  # bool[batch]: ... or NaN/inf draft logits
  num_proposed: jax.Array | None = None  # int32[batch]: tokens proposed (a tree's K * gamma)
  chosen: jax.Array | None = None  # int32[batch]: the chain the path followed (trees)

  def committed(self) -> jax.Array:
    """x_1..x_n, y, then padding: int32[batch, gamma + 1] (the first n + 1 are real)."""
    offsets = jnp.arange(self.path.shape[1] + 1, dtype=jnp.int32)[None, :]  # [1, gamma + 1]
    y_at_n = offsets == self.n[:, None]
    return jnp.where(y_at_n, self.y[:, None], jnp.pad(self.path, ((0, 0), (0, 1))))


class Drafter(Protocol):
  """Steps 1, 2, 3 and 5 of one iteration for one draft shape (see the module doc)."""

  gamma: int  # the longest path a verdict can accept

  def cache_positions(self, max_new_tokens: int) -> int:
    """Cache positions each model needs past the prompt."""
    ...

  def init(self, target, prompts: jax.Array, prompt_lengths: jax.Array, num_new_positions: int):
    """Both prefills -> (target_state, last_token int32[batch], drafter state)."""
    ...

  def propose(self, state, active: jax.Array, key: jax.Array) -> Proposal: ...

  def score(
    self, target, target_state, last_token: jax.Array, proposal: Proposal, active
  ) -> Scored: ...

  def verify(self, key: jax.Array, proposal: Proposal, scored: Scored, active) -> Verdict: ...

  def advance(
    self, state, target, target_state, proposal: Proposal, scored: Scored, verdict: Verdict, active
  ) -> tuple[Any, Any]:
    """Step 5 -> (target_state, drafter state) for the next iteration; target_state is
    the target's state before this iteration's call."""
    ...


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


def verify_chain(
  rule: str | VerificationRule,
  sampling: SamplingConfig,
  key: jax.Array,
  proposal: Proposal,
  target_logits: jax.Array,
  active: jax.Array,
) -> Verdict:
  """Step 3 for a chain of draft tokens: the rule's n and y (core.verification).

  target_logits [batch, gamma + 1, vocab]; proposal tokens [batch, gamma]."""
  x, m = proposal.tokens, proposal.num_drafted
  if rule == "greedy":
    n, y = verify_greedy(x, target_logits, m)  # argmax of the logits: no softmax needed
  else:
    q = logits_to_probs(target_logits, sampling)
    n, y = verify(rule, key, x, proposal.probs, q, m)
  gamma = x.shape[1]
  target_bad, draft_bad = bad_logits_used(target_logits, proposal.bad, n, active)
  return Verdict(
    n=n,
    y=y,
    path=x,
    num_drafted=jnp.full_like(n, gamma) if m is None else m,
    target_bad=target_bad,
    draft_bad=draft_bad,
  )


def rewind_target(target, target_state, target_end: jax.Array, n: jax.Array, active: jax.Array):
  """Step 5 for the target after a chain call: it keeps last, x_1..x_n (y is pending).
  target_end int32[batch]: its end before the call."""
  return target.rewind(target_state, jnp.where(active, target_end + n + 1, target_end))


def pending_after(verdict: Verdict, pad_id: int) -> tuple[jax.Array, jax.Array]:
  """What a token-level draft owes after a chain verdict: y, and x_m before it when all m
  proposed tokens were accepted (it never saw x_m). -> (int32[batch, 2], int32[batch])."""
  x, m, n, y = verdict.path, verdict.num_drafted, verdict.n, verdict.y
  all_accepted = n == m
  x_m = jnp.take_along_axis(x, (m - 1)[:, None], axis=1)[:, 0]
  pending_if_all = jnp.stack([x_m, y], axis=1)
  pending_if_not = jnp.stack([y, jnp.full_like(y, pad_id)], axis=1)
  pending = jnp.where(all_accepted[:, None], pending_if_all, pending_if_not)
  return pending, jnp.where(all_accepted, 2, 1)
