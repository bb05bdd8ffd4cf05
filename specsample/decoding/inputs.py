"""Checks and normalises what users pass in, before anything is traced or compiled."""

from __future__ import annotations

import numbers
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from specsample.core.sampling import SamplingConfig


def check_positive_int(name: str, value) -> int:
  if isinstance(value, bool) or not isinstance(value, numbers.Integral):
    raise TypeError(f"{name} must be an int >= 1, got {value!r}")
  if value < 1:
    raise ValueError(f"{name} must be >= 1, got {value}")
  return int(value)


def check_sampling(sampling: SamplingConfig | None) -> SamplingConfig:
  if sampling is None:
    return SamplingConfig()
  if not isinstance(sampling, SamplingConfig):
    raise TypeError(f"sampling must be a specsample.SamplingConfig, got {type(sampling).__name__}")
  return sampling


def check_model(role: str, model) -> None:
  for member in ("vocab_size", "eos_id", "pad_id", "init_state", "extend", "rewind"):
    if not hasattr(model, member):
      raise TypeError(
        f"the {role} model ({type(model).__name__}) lacks `{member}` of the model contract "
        "(specsample.core.contract.LanguageModel)"
      )


def prepare_prompts(
  prompts, prompt_lengths, *, vocab_size: int, pad_id: int
) -> tuple[jax.Array, jax.Array]:
  """Returns right-padded prompts int32[batch, prompt_length] and lengths int32[batch].

  `prompts` is either a [batch, prompt_length] array (all rows full length unless
  `prompt_lengths` says otherwise) or a sequence of token sequences of any lengths.
  """
  if isinstance(prompts, jax.core.Tracer):
    raise TypeError("prompts must be concrete (call the decoder outside jax.jit)")
  if isinstance(prompts, jax.Array) and not prompts.is_fully_addressable:
    return _global_prompts(prompts, prompt_lengths)
  if isinstance(prompts, Sequence) and not isinstance(prompts, str | bytes):
    if prompt_lengths is not None:
      raise ValueError("prompt_lengths is only for array prompts; sequences carry their lengths")
    rows = [np.asarray(row).reshape(-1) for row in prompts]
    if not rows:
      raise ValueError("prompts is empty: need at least one prompt")
    lengths = np.array([len(row) for row in rows], np.int64)
    array = np.full((len(rows), max(1, lengths.max())), pad_id, np.int64)
    for i, row in enumerate(rows):
      array[i, : len(row)] = row
  else:
    array = np.asarray(prompts)
    if array.ndim != 2:
      raise ValueError(f"prompts must be [batch, prompt_length], got shape {array.shape}")
    lengths = (
      np.full((array.shape[0],), array.shape[1], np.int64)
      if prompt_lengths is None
      else np.asarray(prompt_lengths).reshape(-1)
    )
  if array.shape[0] == 0 or array.shape[1] == 0:
    raise ValueError(f"prompts must be non-empty, got shape {array.shape}")
  if not np.issubdtype(array.dtype, np.integer):
    raise TypeError(f"prompts must hold integer token ids, got dtype {array.dtype}")
  if lengths.shape != (array.shape[0],):
    raise ValueError(f"prompt_lengths must be [batch={array.shape[0]}], got {lengths.shape}")
  if np.any(lengths < 1) or np.any(lengths > array.shape[1]):
    raise ValueError(
      f"every prompt needs 1..{array.shape[1]} tokens; got lengths {lengths.tolist()}"
    )
  valid = np.arange(array.shape[1])[None, :] < lengths[:, None]
  bad = valid & ((array < 0) | (array >= vocab_size))
  if bad.any():
    row, col = np.argwhere(bad)[0]
    raise ValueError(
      f"prompt token {int(array[row, col])} at row {row}, position {col} is outside the "
      f"vocabulary [0, {vocab_size})"
    )
  # Converted on the host: a device-side dtype conversion would compile a program.
  return jax.device_put(array.astype(np.int32)), jax.device_put(lengths.astype(np.int32))


def _global_prompts(prompts: jax.Array, prompt_lengths) -> tuple[jax.Array, jax.Array]:
  """Prompts spread over several processes (jax.make_array_from_process_local_data):
  shapes and dtypes are checked here; token values cannot be seen from one process."""
  if prompts.ndim != 2 or not jnp.issubdtype(prompts.dtype, jnp.integer):
    raise ValueError(
      f"prompts must be int[batch, prompt_length], got {prompts.dtype}{prompts.shape}"
    )
  if not isinstance(prompt_lengths, jax.Array) or prompt_lengths.shape != prompts.shape[:1]:
    raise ValueError(
      "multi-process prompts need prompt_lengths as a global int array of shape [batch] "
      "(build both with jax.make_array_from_process_local_data)"
    )
  return prompts.astype(jnp.int32), prompt_lengths.astype(jnp.int32)


def make_key(seed) -> jax.Array:
  """A typed PRNG key from an int seed or a key (typed, or legacy uint32[2])."""
  if isinstance(seed, jax.Array) and jnp.issubdtype(seed.dtype, jax.dtypes.prng_key):
    return seed
  if isinstance(seed, jax.Array | np.ndarray) and seed.shape == (2,) and seed.dtype == np.uint32:
    return jax.random.wrap_key_data(seed)
  if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
    raise TypeError(f"seed must be an int or a jax PRNG key, got {seed!r}")
  return jax.random.key(int(seed))
