"""Checks a flat name -> array map against a T5 configuration and builds the param tree.

Every reader (T5X, Hugging Face) produces `{"encoder/layers_0/attention/query/kernel":
array, ...}` in T5X names and layouts. `assemble` insists on exactly the arrays the
configuration needs, with exactly the right shapes, before building anything: a loader
never returns a half-loaded model.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpy as np

from specsample.checkpoints.errors import CheckpointError
from specsample.models.t5 import T5, T5Config
from specsample.models.t5.network import T5Network


@functools.lru_cache(maxsize=32)
def expected_shapes(config: T5Config) -> dict[str, tuple[int, ...]]:
  """Every parameter's path and shape for `config` (computed abstractly, nothing allocated)."""
  tokens = jax.ShapeDtypeStruct((1, 2), jnp.int32)
  abstract = jax.eval_shape(
    lambda t: T5Network(config).init(jax.random.key(0), t, t)["params"], tokens
  )
  return {"/".join(path): tuple(leaf.shape) for path, leaf in flatten(abstract).items()}


def flatten(tree: Mapping, prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], object]:
  """Nested mappings -> {path tuple: leaf}."""
  flat = {}
  for key, value in tree.items():
    if isinstance(value, Mapping):
      flat.update(flatten(value, (*prefix, str(key))))
    else:
      flat[(*prefix, str(key))] = value
  return flat


def _unflatten(flat: Mapping[str, object]) -> dict:
  tree: dict = {}
  for path, value in flat.items():
    node = tree
    *parents, leaf = path.split("/")
    for part in parents:
      node = node.setdefault(part, {})
    node[leaf] = value
  return tree


def infer_config(flat: Mapping[str, np.ndarray], source: str, dtype: str = "float32") -> T5Config:
  """Reads the architecture off T5X parameter shapes (T5X checkpoints carry no config)."""

  def shape(name: str) -> tuple[int, ...]:
    if name not in flat:
      raise CheckpointError(f"{source}: cannot infer the T5 architecture: no array {name!r}")
    return tuple(np.shape(flat[name]))

  vocab_size, d_model = shape("token_embedder/embedding")
  num_heads, num_buckets = shape("encoder/relpos_bias/rel_embedding")
  inner = shape("encoder/layers_0/attention/query/kernel")[1]
  if inner % num_heads:
    raise CheckpointError(
      f"{source}: attention width {inner} is not a multiple of {num_heads} heads"
    )

  def count_layers(stack: str) -> int:
    pattern = re.compile(rf"^{stack}/layers_(\d+)/")
    return 1 + max((int(m.group(1)) for k in flat if (m := pattern.match(k))), default=-1)

  if "encoder/layers_0/mlp/wi/kernel" in flat:
    activations, mlp_dim = ("relu",), shape("encoder/layers_0/mlp/wi/kernel")[1]
  else:
    activations, mlp_dim = ("gelu", "linear"), shape("encoder/layers_0/mlp/wi_0/kernel")[1]
  return T5Config(
    vocab_size=vocab_size,
    d_model=d_model,
    num_heads=num_heads,
    head_dim=inner // num_heads,
    mlp_dim=mlp_dim,
    num_encoder_layers=count_layers("encoder"),
    num_decoder_layers=count_layers("decoder"),
    mlp_activations=activations,
    tie_word_embeddings="decoder/logits_dense/kernel" not in flat,
    relative_attention_num_buckets=num_buckets,
    dtype=dtype,
  )


def assemble(flat: Mapping[str, np.ndarray], config: T5Config, source: str) -> T5:
  """Validates names and shapes, casts to config.dtype and returns the model.

  Raises CheckpointError naming `source` and every missing, unexpected or misshapen array.
  """
  expected = expected_shapes(config)
  problems = []
  missing = sorted(set(expected) - set(flat))
  if missing:
    problems.append(
      f"missing arrays: {', '.join(missing[:8])}" + (" ..." if len(missing) > 8 else "")
    )
  unexpected = sorted(set(flat) - set(expected))
  if unexpected:
    problems.append(
      f"unexpected arrays: {', '.join(unexpected[:8])}" + (" ..." if len(unexpected) > 8 else "")
    )
  for name in sorted(set(flat) & set(expected)):
    got = tuple(np.shape(flat[name]))
    if got != expected[name]:
      problems.append(f"{name} has shape {got}, expected {expected[name]}")
  if problems:
    raise CheckpointError(
      f"{source} does not match T5 config (d_model={config.d_model}, heads={config.num_heads}, "
      f"layers={config.num_encoder_layers}/{config.num_decoder_layers}, "
      f"mlp={config.mlp_activations}): " + "; ".join(problems)
    )
  dtype = jnp.dtype(config.dtype)
  params = {}
  for name, array in flat.items():
    array = np.asarray(array)
    if not np.issubdtype(array.dtype, np.floating) and array.dtype != jnp.bfloat16:
      raise CheckpointError(f"{source}: {name} has dtype {array.dtype}, expected floating point")
    params[name] = jnp.asarray(array, dtype=dtype)
  return T5(params=_unflatten(params), config=config)
