"""What both decoding loops return: tokens, lengths and statistics."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct


def _to_host(array) -> np.ndarray:
  if isinstance(array, jax.Array) and not array.is_fully_addressable:
    from jax.experimental import multihost_utils

    return np.asarray(multihost_utils.process_allgather(array, tiled=True))
  return np.asarray(array)


def _total(array) -> int:
  """Sum of an int array, also when its rows are spread over several processes."""
  if isinstance(array, jax.Array) and not array.is_fully_addressable:
    return int(jnp.sum(array))  # a replicated scalar every process can read
  return int(np.sum(array))


class NonFiniteLogitsError(FloatingPointError):
  """A model produced NaN or +inf logits (or only -inf) where a token was needed."""


def raise_on_nonfinite(flags_by_model: dict[str, jax.Array]) -> None:
  """Raises NonFiniteLogitsError naming the model and rows whose logits went bad.

  flags_by_model maps a model's role ("target", "draft") to bool[batch]. The loops stop
  a row at its first bad logits, so no token was ever drawn from them.
  """
  problems = []
  for role, flags in flags_by_model.items():
    rows = np.flatnonzero(_to_host(flags))
    if rows.size:
      problems.append(f"the {role} model gave NaN/inf logits in batch rows {rows.tolist()}")
  if problems:
    raise NonFiniteLogitsError(
      "; ".join(problems) + ". No tokens were drawn from them; check the model's weights "
      "and inputs (e.g. float16 overflow, a corrupt checkpoint)."
    )


@struct.dataclass(kw_only=True)
class DecodingStats:
  """Counters of one decoding run. Speculative and autoregressive runs share this type.

  A row takes part in an iteration while it is not finished; each iteration is one
  batched target call (and, when speculating, gamma draft calls). `target_calls` counts
  the batched calls, `iterations` the calls each row took part in.

  The acceptance counters describe the output as kept (decoding.counters): an iteration
  whose n accepted draft tokens and next token y were cut at max_new_tokens or EOS,
  keeping only x_1..x_k (k <= n), counts k accepted draft tokens, no rejection and k
  kept tokens; accepted draft tokens past the cut are not counted. So `kept` is each
  row's generated tokens (`lengths`, EOS included), and accepted + iterations = kept
  except for one token per cut iteration (whose target call's own token y was cut).
  """

  target_calls: jax.Array  # int32[]: batched target forward passes
  draft_calls: jax.Array  # int32[]: batched draft forward passes
  iterations: jax.Array  # int32[batch]: target calls each row took part in
  drafted: jax.Array  # int32[batch]: draft tokens proposed to each row
  accepted: jax.Array  # int32[batch]: accepted draft tokens kept in each row's output
  rejected: jax.Array  # int32[batch]: iterations that kept the correction of a rejection
  # int32[gamma + 1]: row-iterations that counted n accepted; None when autoregressive
  accepted_histogram: jax.Array | None = None
  # int32[batch]: tokens each row's output kept over its counted iterations; None when
  # autoregressive (one per iteration)
  kept: jax.Array | None = None

  @property
  def gamma(self) -> int:
    """Draft tokens per iteration of the run (0 for autoregressive decoding)."""
    if self.accepted_histogram is None:
      return 0
    return int(self.accepted_histogram.shape[-1]) - 1

  @property
  def alpha(self) -> float:
    """Acceptance rate: accepted / verified draft tokens (NaN if nothing was drafted).

    A draft token is verified when it was accepted or was the one rejected; tokens after
    a rejection are never looked at, and verdicts past the end of the output are not
    counted (see the class docstring). For token-wise verification this estimates the
    paper's alpha = E[sum_x min(p, q)] without the bias of accepted / drafted.
    """
    accepted = _total(self.accepted)
    verified = accepted + _total(self.rejected)
    return accepted / verified if verified else float("nan")

  @property
  def acceptance_ratio(self) -> float:
    """Accepted / drafted draft tokens (NaN if nothing was drafted)."""
    drafted = _total(self.drafted)
    return _total(self.accepted) / drafted if drafted else float("nan")

  @property
  def tokens_per_target_call(self) -> float:
    """Tokens a row's output gains per target call (1 when plain): the generated tokens
    / the row-iterations. It is E[n + 1] over the iterations, except that an iteration
    cut at EOS or max_new_tokens counts the k tokens it kept, not the n + 1 that
    verification gave.
    """
    iterations = _total(self.iterations)
    if not iterations:
      return float("nan")
    if self.kept is None:  # plain decoding
      return (_total(self.accepted) + iterations) / iterations
    return _total(self.kept) / iterations


@struct.dataclass(kw_only=True)
class SpeculativeTrace:
  """What every iteration proposed and kept (speculative_generate(..., trace=True)).

  Iterations are bounded by max_new_tokens (each one commits at least one token per
  unfinished row); entries past the last iteration, or of finished rows, are inactive.
  """

  drafts: jax.Array  # int32[max_new_tokens, batch, gamma]: x_1..x_gamma
  drafted: jax.Array  # int32[max_new_tokens, batch]: m, the tokens proposed (gamma if fixed)
  accepted: jax.Array  # int32[max_new_tokens, batch]: n
  next_token: jax.Array  # int32[max_new_tokens, batch]: y (correction or bonus)
  active: jax.Array  # bool[max_new_tokens, batch]: the row took part in that iteration

  def row(self, index: int) -> list[tuple[list[int], int, int]]:
    """(proposed draft tokens, number accepted, next token) for each iteration row `index`
    took part in."""
    drafts, accepted = np.asarray(self.drafts[:, index]), np.asarray(self.accepted[:, index])
    nexts, active = np.asarray(self.next_token[:, index]), np.asarray(self.active[:, index])
    drafted = np.asarray(self.drafted[:, index])
    return [
      (drafts[i, : drafted[i]].tolist(), int(accepted[i]), int(nexts[i]))
      for i in np.flatnonzero(active)
    ]


@struct.dataclass(kw_only=True)
class GenerationOutput:
  tokens: jax.Array  # int32[batch, max_new_tokens], pad_id after each row's end
  lengths: jax.Array  # int32[batch]: generated tokens per row, EOS included
  stats: DecodingStats
  trace: SpeculativeTrace | None = None

  def sequences(self) -> list[list[int]]:
    """Each row's generated tokens as a Python list, without padding (all processes'
    rows when the output is spread over several)."""
    tokens, lengths = _to_host(self.tokens), _to_host(self.lengths)
    return [row[:length].tolist() for row, length in zip(tokens, lengths, strict=True)]
