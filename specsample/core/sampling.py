"""Logits processing shared by draft and target: temperature, top-k, top-p.

Speculative sampling is exact with respect to the *processed* target distribution, so
the draft's and the target's logits go through the very same function below. The
result is a probability vector per position; temperature 0 means greedy decoding and
yields a one-hot vector at the argmax (ties go to the lowest token id).

Order of operations (as in most samplers): divide by temperature, keep the top-k
logits, then keep the smallest prefix of the sorted distribution whose mass reaches
top-p. Tokens tied with the last kept one are kept too, so the result never depends on
how a sort breaks ties.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp


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


def _mask_top_k(logits: jax.Array, top_k: int) -> jax.Array:
  """Sets every logit below the k-th largest to -inf.  [..., vocab] -> [..., vocab]."""
  kth_largest = jax.lax.top_k(logits, top_k)[0][..., -1:]  # [..., 1]
  return jnp.where(logits < kth_largest, -jnp.inf, logits)


def _mask_top_p(logits: jax.Array, top_p: float) -> jax.Array:
  """Keeps the smallest most-likely prefix with mass >= top_p.  [..., vocab] -> [..., vocab]."""
  sorted_logits = jnp.sort(logits, axis=-1)[..., ::-1]  # [..., vocab], descending
  sorted_probs = jax.nn.softmax(sorted_logits, axis=-1)
  mass_before = jnp.cumsum(sorted_probs, axis=-1) - sorted_probs  # mass of strictly better tokens
  kept = mass_before < top_p  # a prefix of the sorted order; always keeps the first token
  # The smallest kept logit is the threshold; ties with it are kept too.
  threshold = jnp.min(jnp.where(kept, sorted_logits, jnp.inf), axis=-1, keepdims=True)
  return jnp.where(logits < threshold, -jnp.inf, logits)


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
    return jax.nn.one_hot(jnp.argmax(logits, axis=-1), vocab, dtype=jnp.float32)
  logits = logits / sampling.temperature
  if 0 < sampling.top_k < vocab:
    logits = _mask_top_k(logits, sampling.top_k)
  if sampling.top_p < 1.0:
    logits = _mask_top_p(logits, sampling.top_p)
  return jax.nn.softmax(logits, axis=-1)


def sample_from_probs(key: jax.Array, probs: jax.Array) -> jax.Array:
  """Draws one token per row.  float[..., vocab] -> int32[...].

  `probs` need not be normalised; zero entries are never drawn.
  """
  log_probs = jnp.log(probs)  # log(0) = -inf: never drawn
  return jax.random.categorical(key, log_probs, axis=-1).astype(jnp.int32)


def nonfinite_logits(logits: jax.Array) -> jax.Array:
  """Flags positions whose logits cannot define a distribution.  [..., vocab] -> bool[...].

  NaN and +inf anywhere are errors; -inf alone is a legitimate "never this token", but a
  position where every logit is -inf has no distribution either.
  """
  bad_entry = jnp.isnan(logits) | (logits == jnp.inf)
  return jnp.any(bad_entry, axis=-1) | jnp.all(logits == -jnp.inf, axis=-1)
