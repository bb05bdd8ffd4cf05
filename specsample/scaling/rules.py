"""Partitioning rules: logical axes of every parameter and cache, mapped onto a mesh.

In the spirit of T5X: each array dimension has a logical name ("vocab", "embed",
"joined_kv", "mlp", "heads", "batch", ...), and a rule table maps logical names to mesh
axes. The default puts model parallelism over vocabulary, attention heads and MLP units
("model") and data parallelism over the batch ("data"); a dimension that its mesh axis
does not divide is replicated instead (the plan and the sharding agree on this).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence

from jax.sharding import PartitionSpec

Rules = Sequence[tuple[str, str | None]]

DEFAULT_RULES: Rules = (
  ("batch", "data"),
  ("vocab", "model"),
  ("joined_kv", "model"),
  ("kv_heads", "model"),
  ("heads", "model"),
  ("mlp", "model"),
  ("embed", None),
  ("length", None),
  ("head_dim", None),
  ("relpos_buckets", None),
)

# Parameter name (the path joined with "/", matched at its end) -> logical axes.
_PARAM_AXES: tuple[tuple[str, tuple[str, ...]], ...] = (
  # T5 (T5X names)
  (r"token_embedder/embedding$", ("vocab", "embed")),
  (r"logits_dense/kernel$", ("embed", "vocab")),
  (r"(query|key|value)/kernel$", ("embed", "joined_kv")),
  (r"out/kernel$", ("joined_kv", "embed")),
  (r"(wi|wi_0|wi_1)/kernel$", ("embed", "mlp")),
  (r"wo/kernel$", ("mlp", "embed")),
  (r"rel_embedding$", ("heads", "relpos_buckets")),
  (r"scale$", ("embed",)),
  # DecoderOnly
  (r"embed/embedding$", ("vocab", "embed")),
  (r"lm_head/kernel$", ("embed", "vocab")),
  (r"(gate|up)/kernel$", ("embed", "mlp")),
  (r"down/kernel$", ("mlp", "embed")),
  (r"output_ids$", (None,)),
  (r"(query|key|value)/bias$", ("joined_kv",)),
  (r"(gate|up)/bias$", ("mlp",)),
  (r"(out|down)/bias$", ("embed",)),
)

# Decoding-state arrays: [batch, positions, heads, head_dim] caches and per-row vectors.
CACHE_AXES = ("batch", "length", "heads", "head_dim")


def param_logical_axes(path: str, ndim: int) -> tuple[str | None, ...]:
  """Logical axes of the parameter at `path` ("decoder/layers_0/mlp/wo/kernel")."""
  for pattern, axes in _PARAM_AXES:
    if re.search(pattern, path) and len(axes) == ndim:
      return axes
  raise ValueError(f"no partitioning rule for parameter {path!r} ({ndim} dims)")


def mesh_axis(logical: str | None, rules: Rules) -> str | None:
  for name, axis in rules:
    if name == logical:
      return axis
  return None


def partition_spec(
  logical_axes: Sequence[str | None],
  shape: Sequence[int],
  mesh_shape: Mapping[str, int],
  rules: Rules = DEFAULT_RULES,
) -> PartitionSpec:
  """The PartitionSpec for an array; dims the mesh axis does not divide stay replicated,
  and a mesh axis is used at most once per array."""
  spec, used = [], set()
  for logical, size in zip(logical_axes, shape, strict=True):
    axis = mesh_axis(logical, rules)
    if axis is None or axis in used or mesh_shape.get(axis, 1) == 1 or size % mesh_shape[axis]:
      spec.append(None)
    else:
      spec.append(axis)
      used.add(axis)
  return PartitionSpec(*spec)


def shard_count(spec: PartitionSpec, mesh_shape: Mapping[str, int]) -> int:
  """How many pieces an array with this spec is cut into (its bytes per device divide)."""
  return math.prod(mesh_shape[axis] for axis in spec if axis is not None)
