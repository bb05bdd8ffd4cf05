"""Pieces both loops share: drawing tokens and committing them to the output buffer."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from specsample.core.sampling import (
  SamplingConfig,
  argmax_tokens,
  logits_to_probs,
  sample_from_probs,
)


def draw(
  key: jax.Array, logits: jax.Array, sampling: SamplingConfig, *, need_probs: bool = True
) -> tuple[jax.Array, jax.Array | None]:
  """Processes logits and draws a token.

  [batch, vocab] -> (int32[batch], probs float32[batch, vocab]). Greedy decoding without
  `need_probs` skips the probabilities (None) and only takes the argmax.
  """
  if sampling.is_greedy:
    token = argmax_tokens(logits)
    return token, jax.nn.one_hot(token, logits.shape[-1]) if need_probs else None
  probs = logits_to_probs(logits, sampling)
  return sample_from_probs(key, probs), probs


def commit(
  tokens: jax.Array,
  lengths: jax.Array,
  done: jax.Array,
  candidates: jax.Array,
  num_candidates: jax.Array,
  *,
  eos_id: int | tuple[int, ...] | None,
) -> tuple[jax.Array, jax.Array, jax.Array]:
  """Appends each unfinished row's first candidates to its output; ends rows at EOS or full.

  Args:
    tokens: int32[batch, max_new_tokens] output buffer (pad after each row's length).
    lengths: int32[batch] tokens generated so far.
    done: bool[batch] rows that already ended (they are left untouched).
    candidates: int32[batch, k] tokens to append, in order.
    num_candidates: int32[batch] how many of them are real (0..k).
    eos_id: a row ends right after its first EOS (one id, or a tuple of ids that each
      end a row, e.g. Llama 3's <|end_of_text|> and <|eot_id|>); None disables.

  Returns:
    (tokens, lengths, done) after the commit.
  """
  batch, max_new_tokens = tokens.shape
  offsets = jnp.arange(candidates.shape[1], dtype=jnp.int32)[None, :]  # [1, k]
  keep = (offsets < num_candidates[:, None]) & ~done[:, None]  # [batch, k]
  ends_row = jnp.zeros_like(keep)
  eos_ids = () if eos_id is None else (eos_id,) if isinstance(eos_id, int) else tuple(eos_id)
  if eos_ids:
    is_eos = functools.reduce(jnp.logical_or, [candidates == e for e in eos_ids]) & keep
    after_eos = (jnp.cumsum(is_eos, axis=1) - is_eos) > 0  # an EOS came strictly earlier
    keep &= ~after_eos
    ends_row = is_eos & keep
  positions = lengths[:, None] + offsets  # [batch, k]
  keep &= positions < max_new_tokens
  rows = jnp.arange(batch)[:, None]
  tokens = tokens.at[rows, jnp.where(keep, positions, max_new_tokens)].set(candidates, mode="drop")
  lengths = lengths + jnp.sum(keep, axis=1, dtype=jnp.int32)
  done = done | jnp.any(ends_row & keep, axis=1) | (lengths >= max_new_tokens)
  return tokens, lengths, done
