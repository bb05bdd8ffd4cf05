"""Compact weights: a model's weight matrices stored in bfloat16, its arithmetic in float32.

`with_weight_dtype(model, "bfloat16")` keeps every weight matrix (the parameters with two
or more axes: embeddings, projections, output layers, T5's relative-position tables) in
bfloat16 and leaves the rest (norm scales, biases, index tables) as they are. The model's
config keeps dtype "float32", so activations, caches and sums stay float32: on a CPU the
small-k kernel reads the bfloat16 weights (half the bytes per decoded token) and widens
them in registers, which is exact, so the logits equal, bit for bit, those of the same
model with the widened weights stored as float32 (elsewhere XLA converts each weight
before its product). This is not the "bfloat16" dtype of a config (bfloat16 activations,
as on TPUs), whose rounding makes speculative greedy output differ from plain greedy
output (docs/accelerators.md). GGUF matrices kept in their blocks (`load_model(...,
gguf_blocks=True)`) are the other compact form; `block_formats` says which a model has.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from specsample.kernels import BLOCK_MATRICES, Int8BlockMatrix

WEIGHT_DTYPES = ("float32", "bfloat16")


def _is_weight_matrix(leaf) -> bool:
  return leaf.ndim >= 2 and jnp.issubdtype(leaf.dtype, jnp.floating)


def with_weight_dtype(model, dtype: str):
  """The model (T5, DecoderOnly: any with `params` and a float32 `config.dtype`) with its
  weight matrices cast to `dtype` ("float32" or "bfloat16")."""
  if dtype not in WEIGHT_DTYPES:
    raise ValueError(f"weight dtype must be one of {WEIGHT_DTYPES}, got {dtype!r}")
  compute = getattr(model.config, "dtype", "float32")
  if compute != "float32":
    raise ValueError(
      f"compact weights need a float32 model (its arithmetic), got dtype {compute!r}; load "
      "the model in float32 and pass the weight dtype"
    )
  target = jnp.dtype(dtype)
  params = jax.tree.map(
    lambda leaf: leaf.astype(target) if _is_weight_matrix(leaf) else leaf, model.params
  )
  return model.replace(params=params)


def weight_dtype(model) -> str:
  """The dtype of the model's weight matrices ("float32", "bfloat16", ...)."""
  dtypes = {str(leaf.dtype) for leaf in jax.tree.leaves(model.params) if _is_weight_matrix(leaf)}
  if len(dtypes) != 1:
    raise ValueError(f"the model's weight matrices have mixed dtypes {sorted(dtypes)}")
  return dtypes.pop()


def block_formats(model) -> set[str]:
  """The GGUF block formats of the model's matrices kept in blocks ({"q4_1", "q8_0"}, ...;
  empty when none are, or the model has no parameters)."""
  params = getattr(model, "params", None)
  kept = jax.tree.leaves(params, is_leaf=lambda leaf: isinstance(leaf, BLOCK_MATRICES))
  return {leaf.format for leaf in kept if isinstance(leaf, BLOCK_MATRICES)}


def activations(model) -> str:
  """The arithmetic of the model's block matrices: "int8" when they are kept for 8-bit
  activations (`Int8BlockMatrix`), else "float32"."""
  params = getattr(model, "params", None)
  kept = jax.tree.leaves(params, is_leaf=lambda leaf: isinstance(leaf, BLOCK_MATRICES))
  return "int8" if any(isinstance(leaf, Int8BlockMatrix) for leaf in kept) else "float32"


def weight_bytes(model) -> int:
  """Bytes of all the model's parameters as stored (what a decoding step streams, about)."""
  return sum(leaf.size * leaf.dtype.itemsize for leaf in jax.tree.leaves(model.params))


def read_weights(params, skip=lambda path: False) -> tuple[int, int]:
  """(count, bytes) of the weight matrices in `params` (floating leaves with two or more
  axes, and GGUF block matrices) whose key path `skip(path)` (a tuple of names) rejects;
  what a model's `weights_per_call` sums."""
  count = nbytes = 0
  leaves = jax.tree_util.tree_flatten_with_path(
    params, is_leaf=lambda leaf: isinstance(leaf, BLOCK_MATRICES)
  )[0]
  for path, leaf in leaves:
    names = tuple(str(getattr(key, "key", getattr(key, "name", key))) for key in path)
    if skip(names):
      continue
    if isinstance(leaf, BLOCK_MATRICES):
      count, nbytes = count + leaf.shape[0] * leaf.shape[1], nbytes + leaf.nbytes
    elif _is_weight_matrix(leaf):
      count, nbytes = count + leaf.size, nbytes + leaf.size * leaf.dtype.itemsize
  return count, nbytes
