"""A long prefill in passes: a prompt array goes through a model in passes of
PREFILL_CHUNK positions, only as many as its longest row needs, so that a batch padded to
a fixed width (one compiled program for many prompts) pays for the tokens it holds, not
for the width.

The last pass ends at the array's end and may overlap the one before it, writing those
positions again. Each position sees the same cache entries as in one pass over the whole
width; where the arithmetic does not depend on the number of rows in a call (the 8-bit
kernels) the cache and the outputs are one pass's, bit for bit. Positions past the passes
are never written (a row's positions past its length are padding either way).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

# Passes of 64 rows keep the products bound by arithmetic (a pass reads the weights once)
# and waste at most 63 positions past the longest row. Read when a call is traced.
PREFILL_CHUNK = 64


def goes_in_passes(width: int) -> bool:
  """Whether a prompt array `width` positions wide is prefilled in passes (static): from
  two passes' width on; a narrower one goes in one pass, which costs no more."""
  return width >= 2 * PREFILL_CHUNK


def in_passes(
  run_pass: Callable[[Any, jax.Array], tuple[Any, jax.Array | None]],
  state: Any,
  width: int,
  prompt_lengths: jax.Array,
) -> tuple[Any, jax.Array | None]:
  """Runs `run_pass(state, start) -> (state, outputs [batch, chunk, ...] or None)` over
  positions start .. start + PREFILL_CHUNK - 1 of a prompt array `width` wide, for as
  many passes as the longest of prompt_lengths int32[batch] needs (a `lax.fori_loop`).
  run_pass writes at `start` (it slices its inputs there and sets each row's end index).

  Returns (state, outputs [batch, width, ...] with the passes' outputs at their
  positions and zeros past them, or None where run_pass gives none)."""
  chunk = PREFILL_CHUNK
  if width < chunk:
    raise ValueError(f"a prefill in passes of {chunk} needs a width of >= {chunk}, got {width}")
  shapes = jax.eval_shape(run_pass, state, jnp.int32(0))[1]  # traced only, not run
  buffer = None
  if shapes is not None:  # [batch, chunk, ...] -> [batch, width, ...]
    buffer = jnp.zeros((shapes.shape[0], width, *shapes.shape[2:]), shapes.dtype)

  def body(index, carry):
    state, buffer = carry
    start = jnp.minimum(index * chunk, width - chunk)
    state, outputs = run_pass(state, start)
    if buffer is not None:
      buffer = jax.lax.dynamic_update_slice_in_dim(buffer, outputs, start, axis=1)
    return state, buffer

  passes = (jnp.max(prompt_lengths) + chunk - 1) // chunk
  return jax.lax.fori_loop(0, passes, body, (state, buffer))
