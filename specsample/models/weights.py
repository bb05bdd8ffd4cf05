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
import numpy as np

from specsample.kernels import Int8BlockMatrix
from specsample.kernels.matrices import is_block_matrix

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
  kept = jax.tree.leaves(params, is_leaf=is_block_matrix)
  return {leaf.format for leaf in kept if is_block_matrix(leaf)}


def activations(model) -> str:
  """The arithmetic of the model's block matrices: "int8" when they are kept for 8-bit
  activations (`Int8BlockMatrix`), "int8x2" when those take a second pass over the
  activations' rounding error, else "float32"."""
  params = getattr(model, "params", None)
  kept = jax.tree.leaves(params, is_leaf=is_block_matrix)
  passes = {leaf.passes for leaf in kept if isinstance(leaf, Int8BlockMatrix)}
  if not passes:
    return "float32"
  return "int8x2" if max(passes) == 2 else "int8"


def cache_numbers(model) -> str:
  """The numbers a model's key/value caches hold: a decoder-only model's `cache_dtype`, else
  (or when that is None) the model's dtype ("float32" or "bfloat16")."""
  config = model.config
  return getattr(config, "cache_dtype", None) or config.dtype


def weight_bytes(model) -> int:
  """Bytes of all the model's parameters as stored (what a decoding step streams, about)."""
  return sum(leaf.size * leaf.dtype.itemsize for leaf in jax.tree.leaves(model.params))


def read_weights(params, skip=lambda path: False) -> tuple[int, int]:
  """(count, bytes) of the weight matrices in `params` (floating leaves with two or more
  axes, and GGUF block matrices) whose key path `skip(path)` (a tuple of names) rejects;
  what a model's `weights_per_call` sums."""
  count = nbytes = 0
  leaves = jax.tree_util.tree_flatten_with_path(params, is_leaf=is_block_matrix)[0]
  for path, leaf in leaves:
    names = tuple(str(getattr(key, "key", getattr(key, "name", key))) for key in path)
    if skip(names):
      continue
    if is_block_matrix(leaf):
      count, nbytes = count + leaf.shape[0] * leaf.shape[1], nbytes + leaf.nbytes
    elif _is_weight_matrix(leaf):
      count, nbytes = count + leaf.size, nbytes + leaf.size * leaf.dtype.itemsize
  return count, nbytes


# Weight matrices a draft may keep in Q8_0 blocks: the projections' [in, out] kernels, and
# [out, in] output rows (a feature draft's `output_embedding`).
_KERNELS = {"kernel": True, "output_embedding": False}  # name -> stored [in, out]


def q8_0_blocks(matrix: np.ndarray) -> np.ndarray:
  """GGUF Q8_0 blocks of a float32 [out, in] matrix (in a multiple of 32), as llama.cpp
  quantizes: per block of 32, d = max |x| / 127 (float16) and q = round(x / d).
  -> uint8 [out, in / 32 * 34] (each block: d's two bytes, then 32 int8)."""
  out, width = matrix.shape
  x = np.asarray(matrix, np.float32).reshape(out, width // 32, 32)
  d = (np.abs(x).max(axis=-1, keepdims=True) / 127).astype(np.float16)  # [out, blocks, 1]
  scale = d.astype(np.float32)
  inverse = np.divide(1.0, scale, out=np.zeros_like(scale), where=scale > 0)
  q = np.clip(np.rint(x * inverse), -127, 127).astype(np.int8)
  blocks = np.concatenate([d.view(np.uint8), q.view(np.uint8)], axis=-1)  # [out, blocks, 34]
  return blocks.reshape(out, width // 32 * 34)


def with_q8_0_draft(model):
  """A draft with its float32 weight matrices (projection kernels, output rows; those whose
  input width is a multiple of 32) kept as Q8_0 blocks for 8-bit activations
  (`Int8BlockMatrix`): a quarter of the bytes a call reads. The weights are rounded to 8
  bits, so the draft proposes slightly differently; what speculative decoding outputs
  does not depend on the draft's numbers. Matrices in blocks already stay."""
  from specsample.kernels.int8_blocks import from_gguf_blocks

  def convert(path, leaf):
    name = getattr(path[-1], "key", None) if path else None
    if name not in _KERNELS or is_block_matrix(leaf) or leaf.dtype != jnp.float32:
      return leaf
    matrix = np.asarray(leaf).T if _KERNELS[name] else np.asarray(leaf)  # [out, in]
    if leaf.ndim != 2 or matrix.shape[1] % 32:
      return leaf
    return from_gguf_blocks(q8_0_blocks(matrix), "q8_0")

  params = jax.tree_util.tree_map_with_path(convert, model.params, is_leaf=is_block_matrix)
  return model.replace(params=params)
