"""Logits processing shared by draft and target: temperature, top-k, top-p.

Speculative sampling is exact with respect to the *processed* target distribution, so
the draft's and the target's logits go through the very same function below. The
result is a probability vector per position; temperature 0 means greedy decoding and
yields a one-hot vector at the argmax (ties go to the lowest token id).

Order of operations (as in most samplers): divide by temperature (after subtracting
the largest logit, so that tiny temperatures cannot overflow), keep the top-k
logits, then keep the smallest prefix of the sorted distribution whose mass reaches
top-p. Tokens tied with the last kept one are kept too, so the result never depends on
how a sort breaks ties.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp

# Logits are divided by the temperature in float32; below this (float32's smallest normal
# number) the divisor is subnormal, which XLA:CPU flushes to zero.
SMALLEST_TEMPERATURE = float(jnp.finfo(jnp.float32).tiny)


@dataclasses.dataclass(frozen=True)
class SamplingConfig:
  """How logits become a sampling distribution (static: part of the compiled program).

  Attributes:
    temperature: 0 selects greedy decoding; otherwise logits are divided by it.
    top_k: keep the k most likely tokens; 0 keeps all.
    top_p: keep the smallest set of most likely tokens with total mass >= top_p;
      1.0 keeps all.
  """

  temperature: float = 1.0
  top_k: int = 0
  top_p: float = 1.0

  def __post_init__(self):
    temperature, top_k, top_p = self.temperature, self.top_k, self.top_p
    if isinstance(temperature, bool) or not isinstance(temperature, int | float):
      raise TypeError(f"temperature must be a number, got {temperature!r}")
    if not math.isfinite(temperature) or temperature < 0:
      raise ValueError(f"temperature must be a finite number >= 0 (0 = greedy), got {temperature}")
    if 0 < temperature < SMALLEST_TEMPERATURE:
      raise ValueError(
        f"temperature {temperature} is below float32's smallest normal number "
        f"({SMALLEST_TEMPERATURE:.3g}; CPUs flush it to 0): use 0 for greedy decoding"
      )
    if isinstance(top_k, bool) or not isinstance(top_k, int):
      raise TypeError(f"top_k must be an int (0 disables it), got {top_k!r}")
    if top_k < 0:
      raise ValueError(f"top_k must be >= 0 (0 disables it), got {top_k}")
    if isinstance(top_p, bool) or not isinstance(top_p, int | float):
      raise TypeError(f"top_p must be a number in (0, 1], got {top_p!r}")
    if not (0.0 < top_p <= 1.0):
      raise ValueError(f"top_p must be in (0, 1] (1 disables it), got {top_p}")
    # Normalise so that equal settings hash equally (1 and 1.0 compile once).
    object.__setattr__(self, "temperature", float(temperature))
    object.__setattr__(self, "top_p", float(top_p))

  @property
  def is_greedy(self) -> bool:
    return self.temperature == 0.0


GREEDY = SamplingConfig(temperature=0.0)


# Inverse-CDF sampling scans the vocabulary in blocks of this many tokens: one cumulative
# sum over block masses, one inside the chosen block (XLA:CPU's long cumsums are slow).
_SAMPLING_BLOCK = 128


def _first_max(scores: jax.Array) -> jax.Array:
  """Index of the largest score, lowest on ties, by two plain reductions (max, then min
  over matching indices), which XLA:CPU runs several times faster than its variadic
  argmax reduce.  float[..., n] -> int32[...]."""
  n = scores.shape[-1]
  best = jnp.max(scores, axis=-1, keepdims=True)
  index = jax.lax.broadcasted_iota(jnp.float32, scores.shape, scores.ndim - 1)
  first = jnp.min(jnp.where(scores == best, index, float(n)), axis=-1)
  return jnp.minimum(first, n - 1).astype(jnp.int32)  # NaN rows: flagged elsewhere


def argmax_tokens(scores: jax.Array) -> jax.Array:
  """Index of the largest score, lowest index on ties.  float[..., vocab] -> int32[...].

  Equal to jnp.argmax. A vocabulary of whole blocks of _SAMPLING_BLOCK is taken in two
  stages (the first block holding the maximum, then the first maximum inside it): one
  pass over the scores and a short one, 2.7x faster than one pass with an index for a
  49152-token vocabulary here.
  """
  vocab = scores.shape[-1]
  if vocab % _SAMPLING_BLOCK or vocab < 4 * _SAMPLING_BLOCK:
    return _first_max(scores)
  lead = scores.shape[:-1]
  blocks = scores.reshape(*lead, vocab // _SAMPLING_BLOCK, _SAMPLING_BLOCK)
  which = _first_max(jnp.max(blocks, axis=-1))  # [...]: the first block with the maximum
  inside = jnp.take_along_axis(blocks, which[..., None, None], axis=-2)[..., 0, :]
  return which * _SAMPLING_BLOCK + _first_max(inside)


def _mask_top_k(logits: jax.Array, top_k: int) -> jax.Array:
  """Sets every logit below the k-th largest to -inf.  [..., vocab] -> [..., vocab]."""
  kth_largest = jax.lax.top_k(logits, top_k)[0][..., -1:]  # [..., 1]
  return jnp.where(logits < kth_largest, -jnp.inf, logits)


def _top_p_threshold(probs: jax.Array, top_p: float) -> jax.Array:
  """The probability of the last token in the top-p nucleus.  [..., vocab] -> [..., 1].

  The nucleus is the smallest most-likely prefix of the sorted distribution whose mass
  reaches top_p, plus tokens tied with its last one, i.e. {x : probs(x) >= t*} with
  t* = max{t : mass(probs >= t) >= top_p}. Found by bisection over the bit patterns of
  non-negative float32 values (ordered like the values), which is exact after 31 steps
  and avoids a sort (XLA:CPU sorts a 32k vocabulary in milliseconds).
  """
  bits = jax.lax.bitcast_convert_type(probs, jnp.int32)  # monotone in probs >= 0
  low = jnp.zeros(probs.shape[:-1], jnp.int32)  # threshold 0 keeps everything: always valid
  high = jnp.max(bits, axis=-1)

  def halve(_, bounds):
    low, high = bounds
    middle = low + (high - low + 1) // 2
    threshold = jax.lax.bitcast_convert_type(middle, jnp.float32)[..., None]
    mass = jnp.sum(jnp.where(probs >= threshold, probs, 0.0), axis=-1)
    valid = mass >= top_p
    return jnp.where(valid, middle, low), jnp.where(valid, high, middle - 1)

  low, _ = jax.lax.fori_loop(0, 31, halve, (low, high))
  return jax.lax.bitcast_convert_type(low, jnp.float32)[..., None]


def logits_to_probs(logits: jax.Array, sampling: SamplingConfig) -> jax.Array:
  """Turns raw logits into the distribution tokens are sampled from.

  Args:
    logits: float[..., vocab], any float dtype (computed in float32).
    sampling: the static sampling settings.

  Returns:
    float32[..., vocab] probabilities (one-hot at the argmax when greedy).
  """
  logits = logits.astype(jnp.float32)
  vocab = logits.shape[-1]
  if sampling.is_greedy:
    return jax.nn.one_hot(argmax_tokens(logits), vocab, dtype=jnp.float32)
  # Shift before dividing: (logits - max) / T keeps the largest entry at exactly 0 for
  # any T > 0, where logits / T overflows to inf at tiny T (inf - inf = NaN in softmax).
  shifted = logits - jnp.max(logits, axis=-1, keepdims=True)  # [..., vocab], max entry 0
  logits = shifted / sampling.temperature
  if 0 < sampling.top_k < vocab:
    logits = _mask_top_k(logits, sampling.top_k)
  probs = jax.nn.softmax(logits, axis=-1)
  if sampling.top_p < 1.0:
    kept = jnp.where(probs >= _top_p_threshold(probs, sampling.top_p), probs, 0.0)
    probs = kept / jnp.sum(kept, axis=-1, keepdims=True)
  return probs


def _last_positive(probs: jax.Array) -> jax.Array:
  """Largest index with probs > 0 (0 if none).  [..., n] -> int32[...]."""
  index = jax.lax.broadcasted_iota(jnp.int32, probs.shape, probs.ndim - 1)
  return jnp.maximum(jnp.max(jnp.where(probs > 0, index, -1), axis=-1), 0)


def sample_from_probs(key: jax.Array, probs: jax.Array) -> jax.Array:
  """Draws one token per row by inverse-CDF sampling.  float[..., vocab] -> int32[...].

  `probs` need not be normalised; zero entries are never drawn. One uniform number per
  row (instead of one per vocabulary entry for Gumbel-max), and the CDF is built in
  blocks: first over block masses, then inside the chosen block.
  """
  vocab = probs.shape[-1]
  batch_shape = probs.shape[:-1]
  padded = jnp.pad(probs, [(0, 0)] * len(batch_shape) + [(0, -vocab % _SAMPLING_BLOCK)])
  blocks = padded.reshape(*batch_shape, -1, _SAMPLING_BLOCK)  # [..., num_blocks, block]
  block_mass = jnp.sum(blocks, axis=-1)  # [..., num_blocks]
  block_cdf = jnp.cumsum(block_mass, axis=-1)
  target = jax.random.uniform(key, batch_shape) * block_cdf[..., -1]  # [...], in [0, total)

  # The block where the CDF passes `target` (the last non-empty one if rounding overshoots).
  block = jnp.sum(block_cdf <= target[..., None], axis=-1)
  block = jnp.minimum(block, _last_positive(block_mass)).astype(jnp.int32)  # [...]
  mass_before = jnp.take_along_axis(block_cdf - block_mass, block[..., None], axis=-1)[..., 0]
  inside = jnp.take_along_axis(blocks, block[..., None, None], axis=-2)[..., 0, :]  # [..., block]
  offset = jnp.sum(jnp.cumsum(inside, axis=-1) <= (target - mass_before)[..., None], axis=-1)
  offset = jnp.minimum(offset, _last_positive(inside))
  return (block * _SAMPLING_BLOCK + offset).astype(jnp.int32)


def nonfinite_logits(logits: jax.Array) -> jax.Array:
  """Flags positions whose logits cannot define a distribution.  [..., vocab] -> bool[...].

  NaN and +inf anywhere are errors; -inf alone is a legitimate "never this token", but a
  position where every logit is -inf has no distribution either. One reduction: the
  maximum is NaN, +inf or -inf exactly in those cases (XLA's max propagates NaN).
  """
  return ~jnp.isfinite(jnp.max(logits, axis=-1))


def top_probability(logits: jax.Array) -> jax.Array:
  """The most likely token's probability, softmax(logits) at the maximum, as
  1 / sum exp(logits - max).  float[..., vocab] -> float32[...] (NaN where
  `nonfinite_logits`)."""
  logits = logits.astype(jnp.float32)
  best = jnp.max(logits, axis=-1, keepdims=True)
  return 1.0 / jnp.sum(jnp.exp(logits - best), axis=-1)
