"""A prefill in passes for prompt arrays padded past their longest row.

`specsample bench` and the comparison scripts pad every prompt to one width, so
that one compiled program serves them all; a 40-token prompt padded to 280 positions then
pays for 280 in one pass. A model whose `padded_prefill` is on (`for_padded_prompts`)
prefills such an array in passes of PREFILL_CHUNK positions, only as many as the longest
row needs, so that it pays for the tokens it holds.

Passes cost more per position than one pass over the same positions: each reads the
weights again, and 64 rows at a time use the products less well. So `prefill` takes the
passes only where they cover at most PASSES_WORTH of the width, and one pass over the
whole width otherwise; the choice is made on the device, from the prompt lengths
(`lax.cond`). Both ways are compiled into the program (the prefill's compilation about
doubles), which is why the option is off by default: a prompt decoded at its own width
never gains from it.

Each position sees the same cache entries as in one pass over the whole width; where the
arithmetic does not depend on the number of rows in a call (the 8-bit kernels) the cache
and the outputs are one pass's, bit for bit. Positions past the passes are never written
(a row's positions past its length are padding either way). A last pass that would run
past the width ends at the width instead, overlapping the one before it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

# Passes of 64 rows keep the products bound by arithmetic (a pass reads the weights once)
# and waste at most 63 positions past the longest row. Read when a call is traced.
PREFILL_CHUNK = 64
# The passes are taken where the positions they cover are at most this share of the width.
PASSES_WORTH = 0.85


def goes_in_passes(width: int) -> bool:
  """Whether a prompt array `width` positions wide may be prefilled in passes (static):
  from two passes' width on; a narrower one goes in one pass, which costs no more."""
  return width >= 2 * PREFILL_CHUNK


def for_padded_prompts(model):
  """`model` with its `padded_prefill` on (behind prompt lookup: the model inside); a
  model without the option (prompt lookup alone, T5, the toys) as it is."""
  if hasattr(model, "padded_prefill"):
    return model.replace(padded_prefill=True)
  inner = getattr(model, "model", None)  # LookupThenModel
  if inner is not None and hasattr(inner, "padded_prefill"):
    return model.replace(model=inner.replace(padded_prefill=True))
  return model


def prefill(
  one_pass: Callable[[Any], tuple[Any, jax.Array | None]],
  run_pass: Callable[[Any, jax.Array], tuple[Any, jax.Array | None]],
  state: Any,
  width: int,
  prompt_lengths: jax.Array,
  padded: bool,
) -> tuple[Any, jax.Array | None]:
  """`one_pass(state) -> (state, outputs [batch, width, ...] or None)` over the whole
  width, or, for a `padded` model (static), `in_passes(run_pass, ...)` where the passes
  cover at most PASSES_WORTH of it (a `lax.cond` on prompt_lengths int32[batch]; widths
  under two passes: one pass)."""
  if not padded or not goes_in_passes(width):
    return one_pass(state)
  chunk = PREFILL_CHUNK
  covered = (jnp.max(prompt_lengths) + chunk - 1) // chunk * chunk
  return jax.lax.cond(
    covered <= PASSES_WORTH * width,
    lambda state: in_passes(run_pass, state, width, prompt_lengths),
    one_pass,
    state,
  )


def in_passes(
  run_pass: Callable[[Any, jax.Array], tuple[Any, jax.Array | None]],
  state: Any,
  width: int,
  prompt_lengths: jax.Array,
) -> tuple[Any, jax.Array | None]:
  """Runs `run_pass(state, start) -> (state, outputs [batch, chunk, ...] or None)` over
  positions start .. start + PREFILL_CHUNK - 1 of a prompt array `width` wide, for as
  many passes as the longest of prompt_lengths int32[batch] needs (a `lax.fori_loop`).
  Each pass gets the state with every row's end index at `start`; run_pass slices its
  inputs there.

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
    state = state.rewind(jnp.full(prompt_lengths.shape, start, jnp.int32))
    state, outputs = run_pass(state, start)
    if buffer is not None:
      buffer = jax.lax.dynamic_update_slice_in_dim(buffer, outputs, start, axis=1)
    return state, buffer

  passes = (jnp.max(prompt_lengths) + chunk - 1) // chunk
  return jax.lax.fori_loop(0, passes, body, (state, buffer))
