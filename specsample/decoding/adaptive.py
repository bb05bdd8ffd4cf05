"""Adaptive draft length: each row stops drafting when the draft loses confidence.

The draft proposes up to `gamma` tokens per iteration (the static maximum); a row stops
after x_i when the draft's confidence in x_i falls below the row's threshold:
  greedy decoding:  softmax(raw draft logits)[x_i], the draft's own top probability;
  sampling:         p_i(x_i), the processed probability of the token it drew.
x_i itself is still proposed. The stop is thus a stopping time of the draft's own
process: whether x_{i+1} is drafted depends on x_1..x_i and p_1..p_i, never on the
target, and whether x_i is proposed never depends on x_i. That is what keeps every
verification rule exact (core.verification: num_drafted). Dropping the unconfident x_i
instead would propose x_i only when it is confident: a draft whose proposals follow
p_i restricted to its confident tokens, which the rule would treat as p_i. Not exact.

The controller moves each row's threshold from what verification did with the row's
last proposed token: accepted means the row stopped too early (lower the threshold, draft
further), rejected means it drafted past what the target takes (raise it). It settles
where that last token is accepted at `target_acceptance`. The threshold of an iteration
depends only on earlier iterations, so each iteration is still an exact draft.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp


@dataclasses.dataclass(frozen=True)
class AdaptiveDraft:
  """Static settings of adaptive draft length (part of the compiled program).

  Attributes:
    threshold: each row's starting confidence threshold, in [0, 1]: a row stops after a
      draft token whose confidence is below it (0 never stops early: fixed gamma).
    target_acceptance: the acceptance rate of each block's last proposed token the
      controller steers to, in (0, 1); None keeps the threshold fixed.
    step: how far one iteration moves the threshold (times the miss: accepted - target).
    min_threshold, max_threshold: the controller's bounds.
  """

  threshold: float = 0.4
  target_acceptance: float | None = 0.5
  step: float = 0.05
  min_threshold: float = 0.0
  max_threshold: float = 0.95

  def __post_init__(self):
    for name in ("threshold", "step", "min_threshold", "max_threshold"):
      value = getattr(self, name)
      if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"AdaptiveDraft.{name} must be a number, got {value!r}")
      if not (math.isfinite(value) and 0.0 <= value <= 1.0):
        raise ValueError(f"AdaptiveDraft.{name} must be in [0, 1], got {value}")
      object.__setattr__(self, name, float(value))
    if self.min_threshold > self.max_threshold:
      raise ValueError(
        f"AdaptiveDraft.min_threshold {self.min_threshold} > max_threshold {self.max_threshold}"
      )
    if self.target_acceptance is not None:
      if not (0.0 < float(self.target_acceptance) < 1.0):
        raise ValueError(
          f"AdaptiveDraft.target_acceptance must be in (0, 1) or None, got {self.target_acceptance}"
        )
      object.__setattr__(self, "target_acceptance", float(self.target_acceptance))

  def initial_thresholds(self, batch: int) -> jax.Array:
    """float32[batch]: every row starts at `threshold`."""
    return jnp.full((batch,), self.threshold, jnp.float32)

  def update(
    self,
    thresholds: jax.Array,
    *,
    last_accepted: jax.Array,
    counted: jax.Array,
  ) -> jax.Array:
    """The controller: thresholds float32[batch] after one iteration in which each counted
    row's last proposed token was accepted (bool[batch] last_accepted) or not."""
    if self.target_acceptance is None:
      return thresholds
    miss = last_accepted.astype(jnp.float32) - self.target_acceptance  # > 0: stopped too early
    moved = jnp.clip(thresholds - self.step * miss, self.min_threshold, self.max_threshold)
    return jnp.where(counted, moved, thresholds)


def confidence(logits: jax.Array, tokens: jax.Array, probs: jax.Array | None) -> jax.Array:
  """The draft's confidence in the tokens it proposed.  [batch, vocab], int32[batch],
  probs [batch, vocab] or None (greedy) -> float32[batch].

  Sampling: the processed probability p(x) of the drawn token. Greedy (probs None, or
  one-hot): softmax of the raw logits at the argmax, which is 1 / sum exp(l - max).
  """
  if probs is None:
    shifted = logits.astype(jnp.float32) - jnp.max(logits, axis=-1, keepdims=True)
    return 1.0 / jnp.sum(jnp.exp(shifted), axis=-1)
  return jnp.take_along_axis(probs, tokens[:, None], axis=-1)[:, 0]


def drafted_length(confident: jax.Array) -> jax.Array:
  """Tokens each row proposes: through its first unconfident token.

  confident bool[batch, gamma] (the draft's confidence in x_i >= the row's threshold)
  -> int32[batch] in 1..gamma: m = 1 + the number of leading confident tokens, capped.
  """
  gamma = confident.shape[1]
  leading = jnp.sum(jnp.cumprod(confident, axis=1), axis=1).astype(jnp.int32)
  return jnp.minimum(leading + 1, gamma)
