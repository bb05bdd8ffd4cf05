"""Checks and normalises what users pass in, before anything is traced or compiled."""

from __future__ import annotations

import numbers
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from specsample.core.contract import has_features, prompt_pad_id
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


def model_prompts(model, prompts, prompt_lengths=None) -> tuple[jax.Array, jax.Array]:
  """`prompts` (and `prompt_lengths`) as prepare_prompts reads them for `model`: checked
  against its vocabulary, padded with its pad id, its `prompt_pad_id` honoured."""
  return prepare_prompts(
    prompts,
    prompt_lengths,
    vocab_size=model.vocab_size,
    pad_id=model.pad_id,
    prompt_pad_id=prompt_pad_id(model),
  )


def prepare_prompts(
  prompts, prompt_lengths, *, vocab_size: int, pad_id: int, prompt_pad_id: int | None = None
) -> tuple[jax.Array, jax.Array]:
  """Returns right-padded prompts int32[batch, prompt_length] and lengths int32[batch].

  `prompts` is a sequence of token sequences of any lengths (`[[5, 6, 1], [7, 1]]`; a
  flat list of ints is refused: one prompt is `[[5, 6, 1]]`), or a [batch, prompt_length]
  integer array. An array's rows are read as:
    - `prompt_lengths[i]` tokens when `prompt_lengths` is given;
    - else, for a model whose `prompt_pad_id` is set (an id that is never a prompt
      token, e.g. T5's 0: T5X and seqio batches are right-padded with it and masked as
      `tokens > 0`), everything before the row's trailing run of that id;
    - else the whole row, and a row that ends with the model's `pad_id` is refused
      (it is probably padding; pass `prompt_lengths` or ragged lists).
  Token ids must be integers (floats, strings and bools are refused, never rounded).
  """
  if isinstance(prompts, jax.core.Tracer):
    raise TypeError("prompts must be concrete (call the decoder outside jax.jit)")
  if isinstance(prompts, jax.Array) and not prompts.is_fully_addressable:
    return _global_prompts(prompts, prompt_lengths)
  if isinstance(prompts, Sequence) and not isinstance(prompts, str | bytes):
    if prompt_lengths is not None:
      raise ValueError("prompt_lengths is only for array prompts; sequences carry their lengths")
    if not prompts:
      raise ValueError("prompts is empty: need at least one prompt")
    rows = [_token_row(row, i) for i, row in enumerate(prompts)]
    lengths = np.array([len(row) for row in rows], np.int64)
    array = np.full((len(rows), max(1, lengths.max())), pad_id, np.int64)
    for i, row in enumerate(rows):
      array[i, : len(row)] = row
  else:
    array = np.asarray(prompts)
    if array.ndim != 2:
      raise ValueError(f"prompts must be [batch, prompt_length], got shape {array.shape}")
    _check_integer_ids(array, "prompts")
    if prompt_lengths is not None:
      lengths = np.asarray(prompt_lengths)
      _check_integer_ids(lengths, "prompt_lengths")
      lengths = lengths.reshape(-1)
    elif prompt_pad_id is not None:
      lengths = _unpadded_lengths(array, prompt_pad_id)
    else:
      lengths = np.full((array.shape[0],), array.shape[1], np.int64)
      ends_with_pad = np.flatnonzero(array[:, -1] == pad_id) if array.size else []
      if len(ends_with_pad):
        raise ValueError(
          f"prompt rows {ends_with_pad.tolist()} end with the pad id {pad_id}, which this "
          "model also reads as a token: pass prompt_lengths, or the prompts as ragged lists, "
          "so that padding is never decoded as input"
        )
  if array.shape[0] == 0 or array.shape[1] == 0:
    raise ValueError(f"prompts must be non-empty, got shape {array.shape}")
  _check_integer_ids(array, "prompts")
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


def _token_row(row, index: int) -> np.ndarray:
  """One prompt of a ragged sequence as int64[length]; refuses anything but int ids."""
  if isinstance(row, numbers.Number | np.generic) and not isinstance(row, bool | np.bool_):
    raise TypeError(
      f"prompts must be a list of token lists; element {index} is a single token "
      f"({row!r}). One prompt is written [[5, 6, 1]], not [5, 6, 1]"
    )
  if isinstance(row, str | bytes) or not isinstance(row, Sequence | np.ndarray | jax.Array):
    raise TypeError(f"prompt {index} must be a list of int token ids, got {row!r}")
  array = np.asarray(row)
  if array.ndim != 1:
    raise ValueError(f"prompt {index} must be a flat list of token ids, got shape {array.shape}")
  if array.size:
    _check_integer_ids(array, f"prompt {index}")
  return array.astype(np.int64)


def _check_integer_ids(array: np.ndarray, what: str) -> None:
  if array.dtype == np.bool_ or not np.issubdtype(array.dtype, np.integer):
    raise TypeError(
      f"{what} must hold integer token ids, got dtype {array.dtype} (values are never rounded "
      "or parsed: convert them yourself)"
    )


def _unpadded_lengths(array: np.ndarray, pad: int) -> np.ndarray:
  """Per row, the position after its last non-pad token.  int[batch, length] -> int64[batch]."""
  not_pad = array != pad  # [batch, length]
  last = array.shape[1] - 1 - np.argmax(not_pad[:, ::-1], axis=1)  # last non-pad position
  lengths = np.where(not_pad.any(axis=1), last + 1, 0).astype(np.int64)
  if np.any(lengths == 0):
    rows = np.flatnonzero(lengths == 0).tolist()
    raise ValueError(f"prompt rows {rows} hold only padding (id {pad}): every prompt needs a token")
  return lengths


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


SEED_RANGE = (-(2**63), 2**63)  # 64-bit seeds, every bit used (make_key)


def make_key(seed) -> jax.Array:
  """A typed PRNG key from an int seed in SEED_RANGE or a key (typed, or legacy uint32[2]).

  Every bit of a 64-bit seed counts: `jax.random.key` keeps only the low 32 bits when
  64-bit ints are off (as they are here), so the key of the low word is folded with the
  high word (its two's complement's) where that is not 0. Seeds in [0, 2**32) give
  `jax.random.key(seed)` itself."""
  if isinstance(seed, jax.Array) and jnp.issubdtype(seed.dtype, jax.dtypes.prng_key):
    return seed
  if isinstance(seed, jax.Array | np.ndarray) and seed.shape == (2,) and seed.dtype == np.uint32:
    return jax.random.wrap_key_data(seed)
  if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
    raise TypeError(f"seed must be an int or a jax PRNG key, got {seed!r}")
  if not SEED_RANGE[0] <= seed < SEED_RANGE[1]:
    raise ValueError(f"seed must be in [-2**63, 2**63), got {seed}")
  low, high = int(seed) & 0xFFFFFFFF, (int(seed) >> 32) & 0xFFFFFFFF
  key = jax.random.key(low)
  return jax.random.fold_in(key, high) if high else key


def check_feature_pair(target, draft, *, tree) -> None:
  """A feature draft needs a target that gives features of its width; it drafts chains,
  of fixed or adaptive length (trees keep the token-level draft's bookkeeping)."""
  if not has_features(target):
    raise ValueError(
      f"the draft reads the target's features, but the target ({type(target).__name__}) "
      "gives none (it needs feature_size, init_state_with_features, extend_with_features; "
      "DecoderOnly has them)"
    )
  if draft.feature_size != target.feature_size:
    inner = getattr(draft, "model", draft)  # a draft behind prompt lookup
    layers = getattr(getattr(inner, "config", None), "feature_layers", ())
    hint = (
      f" (the draft fuses the target's layers {layers}: pass "
      f"target.with_feature_layers({layers}), or load both with load_pair)"
      if layers else ""
    )  # fmt: skip
    raise ValueError(
      f"the draft reads features of width {draft.feature_size}, the target's are "
      f"{target.feature_size} wide: was the draft trained for this target?{hint}"
    )
  if tree is not None:
    raise ValueError(
      "a feature draft drafts one chain (of fixed or adaptive length): tree drafts are "
      "not supported with it"
    )
