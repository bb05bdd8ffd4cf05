"""Verification rules: which draft tokens to keep, and the token that follows them.

Every rule sees one speculative iteration of a batch:

  draft_tokens  int32[batch, gamma]          x_1 .. x_gamma, drawn from the draft
  draft_probs   float32[batch, gamma, vocab]  p_1 .. p_gamma, the draft's distributions
  target_probs  float32[batch, gamma+1, vocab] q_1 .. q_{gamma+1}, the target's, from
                                             one forward pass over [last, x_1..x_gamma]

and returns, per row, the number n of accepted draft tokens (0..gamma) and the next
token y: a residual sample at the first rejection, or a bonus sample from q_{gamma+1}
when every draft token was accepted. The committed continuation is x_1..x_n, y.

Variable-length drafts: with `num_drafted` int32[batch] (1..gamma) a row proposed only
x_1..x_m, m = num_drafted; positions past m are padding that no rule looks at. This is
the fixed-length rule for a draft whose distribution at position m + 1 is a point mass on
a token the target never emits, so it stays exact whenever m is a stopping time of the
draft's own process (decided from x_1..x_m and the draft's distributions, never from the
target's): no draft token past m is accepted, and the row's next token is drawn from
norm(max(0, q_{m+1} - 0)) = q_{m+1} when all m are accepted.

All three rules leave the output distributed exactly as the (processed) target's:
- `verify_tokenwise`: Leviathan et al. 2023, Algorithm 1.
- `verify_block`: Sun et al. 2024, "Block Verification Accelerates Speculative
  Decoding"; accepts at least as many tokens as token-wise in expectation.
- `verify_greedy`: temperature 0; keeps draft tokens while they equal the target's argmax.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

import jax
import jax.numpy as jnp

from specsample.core.sampling import argmax_tokens, sample_from_probs

VERIFICATION_RULES = ("token", "block", "greedy")


class Verdict(NamedTuple):
  num_accepted: jax.Array  # int32[batch], 0..gamma
  next_token: jax.Array  # int32[batch]


class VerificationRule(Protocol):
  """A custom rule: (key, draft_tokens, draft_probs, target_probs) -> Verdict."""

  def __call__(
    self, key: jax.Array, draft_tokens: jax.Array, draft_probs: jax.Array, target_probs: jax.Array
  ) -> Verdict: ...


def _token_probs(probs: jax.Array, tokens: jax.Array) -> jax.Array:
  """probs[b, i, tokens[b, i]].  [batch, gamma, vocab], [batch, gamma] -> [batch, gamma]."""
  return jnp.take_along_axis(probs, tokens[..., None], axis=-1)[..., 0]


def _row_select(values: jax.Array, index: jax.Array) -> jax.Array:
  """values[b, index[b]].  [batch, n, ...], [batch] -> [batch, ...]."""
  return jnp.take_along_axis(values, index[:, None, None], axis=1)[:, 0]


def _pad_draft_probs(draft_probs: jax.Array) -> jax.Array:
  """Appends an all-zero p_{gamma+1}, so the bonus token is a 'residual' against zero.

  [batch, gamma, vocab] -> [batch, gamma + 1, vocab]
  """
  return jnp.pad(draft_probs, ((0, 0), (0, 1), (0, 0)))


def _sample_residual(key: jax.Array, residual: jax.Array, fallback: jax.Array) -> jax.Array:
  """Samples from norm(residual), or from `fallback` where the residual has no mass.

  A residual is empty only in a probability-zero event reached through float rounding
  (e.g. q == p up to the last bit), where the fallback (the target distribution at that
  position) is the right answer. [batch, vocab] -> int32[batch]
  """
  has_mass = jnp.sum(residual, axis=-1, keepdims=True) > 0  # [batch, 1]
  return sample_from_probs(key, jnp.where(has_mass, residual, fallback))


def _drafted_mask(draft_tokens: jax.Array, num_drafted: jax.Array | None) -> jax.Array:
  """bool[batch, gamma]: positions each row proposed (all of them when num_drafted is None)."""
  batch, gamma = draft_tokens.shape
  if num_drafted is None:
    return jnp.ones((batch, gamma), bool)
  return jnp.arange(1, gamma + 1, dtype=jnp.int32)[None, :] <= num_drafted[:, None]


def _check_shapes(draft_tokens, draft_probs, target_probs) -> None:
  batch, gamma = draft_tokens.shape
  if draft_probs.shape[:2] != (batch, gamma):
    raise ValueError(
      f"draft_probs {draft_probs.shape} does not match draft_tokens {(batch, gamma)}"
    )
  if target_probs.shape[:2] != (batch, gamma + 1):
    raise ValueError(f"target_probs {target_probs.shape} must be [batch, gamma + 1, vocab]")
  if draft_probs.shape[-1] != target_probs.shape[-1]:
    raise ValueError(
      f"draft vocab {draft_probs.shape[-1]} != target vocab {target_probs.shape[-1]}"
    )


def verify_tokenwise(
  key: jax.Array,
  draft_tokens: jax.Array,
  draft_probs: jax.Array,
  target_probs: jax.Array,
  num_drafted: jax.Array | None = None,
) -> Verdict:
  """Leviathan et al. Algorithm 1: accept x_i with probability min(1, q_i(x_i) / p_i(x_i))."""
  _check_shapes(draft_tokens, draft_probs, target_probs)
  batch, gamma = draft_tokens.shape
  accept_key, residual_key = jax.random.split(key)
  drafted = _drafted_mask(draft_tokens, num_drafted)  # [batch, gamma]
  draft_probs = jnp.where(drafted[..., None], draft_probs, 0.0)  # p_{m+1..} = 0
  p_x = _token_probs(draft_probs, draft_tokens)  # [batch, gamma]
  q_x = _token_probs(target_probs[:, :gamma], draft_tokens)  # [batch, gamma]
  u = jax.random.uniform(accept_key, (batch, gamma))  # [batch, gamma], in [0, 1)
  accepted = (u * p_x < q_x) & drafted  # P(accept) = min(1, q/p); never accepts q(x) = 0
  num_accepted = jnp.sum(jnp.cumprod(accepted, axis=1), axis=1).astype(jnp.int32)  # [batch]
  q_n = _row_select(target_probs, num_accepted)  # [batch, vocab]
  p_n = _row_select(_pad_draft_probs(draft_probs), num_accepted)  # [batch, vocab], 0 if n = gamma
  next_token = _sample_residual(residual_key, jnp.maximum(q_n - p_n, 0.0), q_n)
  return Verdict(num_accepted, next_token)


def block_acceptance_probabilities(
  draft_tokens: jax.Array,
  draft_probs: jax.Array,
  target_probs: jax.Array,
  num_drafted: jax.Array | None = None,
) -> tuple[jax.Array, jax.Array]:
  """The deterministic half of block verification: (P, h) for each row's draft block.

  P float32[batch, gamma + 1]: P_0 = 1, P_i = min(1, P_{i-1} q_i(x_i) / p_i(x_i));
  h float32[batch, gamma]: h_i = S_i / (S_i + 1 - P_i) (1 if that is 0/0) for i < gamma,
  with S_i = sum_x max(0, P_i q_{i+1}(x) - p_{i+1}(x)), and h_gamma = P_gamma.
  `verify_block` accepts x_1..x_tau with tau = max{i : eta_i < h_i}, eta_i ~ U(0, 1).
  A row that drafted m < gamma tokens gets P_{m+1..} = 0, h_m = P_m and h_{m+1..} = 0
  (its draft's point mass past m has q = 0), which is the rule at gamma = m.
  """
  _check_shapes(draft_tokens, draft_probs, target_probs)
  batch, gamma = draft_tokens.shape
  drafted = _drafted_mask(draft_tokens, num_drafted)  # [batch, gamma]
  draft_probs = jnp.where(drafted[..., None], draft_probs, 0.0)
  p_x = _token_probs(draft_probs, draft_tokens)  # [batch, gamma]
  q_x = _token_probs(target_probs[:, :gamma], draft_tokens)  # [batch, gamma]
  ratio = jnp.where(drafted, q_x / jnp.where(p_x > 0, p_x, 1.0), 0.0)  # p(x) > 0 when drawn

  # P: [batch, gamma + 1], the running "probability mass still owed" along the block.
  weights = [jnp.ones((batch,), jnp.float32)]
  for i in range(gamma):  # gamma is static and bounded
    weights.append(jnp.minimum(1.0, weights[-1] * ratio[:, i]))
  weight = jnp.stack(weights, axis=1)

  # S_i for i = 1..gamma-1: residual mass at the next position.  [batch, gamma - 1]
  residual_mass = jnp.sum(
    jnp.maximum(weight[:, 1:gamma, None] * target_probs[:, 1:gamma] - draft_probs[:, 1:], 0.0),
    axis=-1,
  )
  denominator = residual_mass + 1.0 - weight[:, 1:gamma]
  safe_denominator = jnp.where(denominator > 0, denominator, 1.0)
  h_inner = jnp.where(denominator > 0, residual_mass / safe_denominator, 1.0)
  return weight, jnp.concatenate([h_inner, weight[:, gamma:]], axis=1)  # h_1..h_gamma


def verify_block(
  key: jax.Array,
  draft_tokens: jax.Array,
  draft_probs: jax.Array,
  target_probs: jax.Array,
  num_drafted: jax.Array | None = None,
) -> Verdict:
  """Block verification (Sun et al. 2024), as stated in design.md section 5.

  With P and h from `block_acceptance_probabilities`: accept x_1..x_tau with
  tau = max{i : eta_i < h_i} (0 if none), then sample from
  norm(max(0, P_tau q_{tau+1} - p_{tau+1})), which is q_{gamma+1} when tau = gamma.
  """
  batch, gamma = draft_tokens.shape
  accept_key, residual_key = jax.random.split(key)
  weight, h = block_acceptance_probabilities(draft_tokens, draft_probs, target_probs, num_drafted)
  draft_probs = jnp.where(_drafted_mask(draft_tokens, num_drafted)[..., None], draft_probs, 0.0)
  eta = jax.random.uniform(accept_key, (batch, gamma))
  positions = jnp.arange(1, gamma + 1, dtype=jnp.int32)  # [gamma]
  num_accepted = jnp.max(jnp.where(eta < h, positions, 0), axis=1).astype(jnp.int32)  # tau

  weight_tau = jnp.take_along_axis(weight, num_accepted[:, None], axis=1)  # [batch, 1]
  q_tau = _row_select(target_probs, num_accepted)  # [batch, vocab]: q_{tau+1}
  p_tau = _row_select(_pad_draft_probs(draft_probs), num_accepted)  # p_{tau+1}, 0 at gamma
  residual = jnp.maximum(weight_tau * q_tau - p_tau, 0.0)
  next_token = _sample_residual(residual_key, residual, q_tau)
  return Verdict(num_accepted, next_token)


def verify_greedy(
  draft_tokens: jax.Array, target_scores: jax.Array, num_drafted: jax.Array | None = None
) -> Verdict:
  """Accepts while x_i == argmax q_i; the next token is argmax q at the first mismatch.

  target_scores: [batch, gamma + 1, vocab] target probabilities or raw logits (same argmax).
  """
  gamma = draft_tokens.shape[1]
  target_argmax = argmax_tokens(target_scores)  # [batch, gamma + 1]
  matches = (draft_tokens == target_argmax[:, :gamma]) & _drafted_mask(draft_tokens, num_drafted)
  num_accepted = jnp.sum(jnp.cumprod(matches, axis=1), axis=1).astype(jnp.int32)
  next_token = jnp.take_along_axis(target_argmax, num_accepted[:, None], axis=1)[:, 0]
  return Verdict(num_accepted, next_token)


def verify(
  rule: str | VerificationRule,
  key: jax.Array,
  draft_tokens: jax.Array,
  draft_probs: jax.Array,
  target_probs: jax.Array,
  num_drafted: jax.Array | None = None,
) -> Verdict:
  """Applies a rule given by name ('token', 'block', 'greedy') or as a callable
  (callables see fixed-length drafts only: num_drafted must be None)."""
  if callable(rule):
    if num_drafted is not None:
      raise ValueError("a custom verification rule takes fixed-length drafts only")
    return Verdict(*rule(key, draft_tokens, draft_probs, target_probs))
  if rule == "token":
    return verify_tokenwise(key, draft_tokens, draft_probs, target_probs, num_drafted)
  if rule == "block":
    return verify_block(key, draft_tokens, draft_probs, target_probs, num_drafted)
  if rule == "greedy":
    return verify_greedy(draft_tokens, target_probs, num_drafted)
  raise ValueError(f"unknown verification rule {rule!r}; expected one of {VERIFICATION_RULES}")
