"""Placing models and inputs on a device mesh (jax.sharding), by the rules of rules.py.

  mesh = make_mesh({"data": 2, "model": 4})
  target = shard_model(target, mesh)           # parameters split by the rules
  draft = shard_model(draft, mesh, model_parallel=False)   # or replicated over "model"
  out = speculative_generate(target, draft, prompts, ...)  # one program over the mesh

A sharded model carries a `Partitioning` (static): its init_state constrains the prompt
batch to the "data" axis and every cache to [data, -, model, -], so XLA's SPMD
partitioner keeps the whole decoding loop sharded; nothing gathers the parameters.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from specsample.scaling.plan import unsplit_fraction
from specsample.scaling.rules import DEFAULT_RULES, Rules, param_logical_axes, partition_spec


def make_mesh(mesh_shape: Mapping[str, int], devices: Sequence | None = None) -> Mesh:
  """A ("data", "model") mesh over `devices` (default: all devices, in order)."""
  devices = list(jax.devices() if devices is None else devices)
  shape = (mesh_shape.get("data", 1), mesh_shape.get("model", 1))
  if math.prod(shape) != len(devices):
    raise ValueError(
      f"mesh data={shape[0]} x model={shape[1]} needs {math.prod(shape)} devices, "
      f"have {len(devices)}"
    )
  return Mesh(np.asarray(devices).reshape(shape), ("data", "model"))


@dataclasses.dataclass(frozen=True)
class Partitioning:
  """Mesh + rules; models call `constrain` on their state arrays (duck-typed, so models
  never import this module)."""

  mesh: Mesh
  rules: Rules = DEFAULT_RULES

  @property
  def mesh_shape(self) -> dict[str, int]:
    return dict(self.mesh.shape)

  def sharding(self, logical_axes: Sequence[str | None], shape: Sequence[int]) -> NamedSharding:
    return NamedSharding(
      self.mesh, partition_spec(logical_axes, shape, self.mesh_shape, self.rules)
    )

  def constrain(self, x: jax.Array, logical_axes: Sequence[str | None]) -> jax.Array:
    """with_sharding_constraint by logical axes (inside jit)."""
    return jax.lax.with_sharding_constraint(x, self.sharding(logical_axes, x.shape))

  def __hash__(self):
    return hash((self.mesh, tuple(self.rules)))


def param_shardings(params, partitioning: Partitioning):
  """A pytree of NamedShardings matching `params`, by parameter name."""

  def one(path, leaf):
    name = "/".join(k.key for k in path)
    return partitioning.sharding(param_logical_axes(name, leaf.ndim), leaf.shape)

  return jax.tree_util.tree_map_with_path(one, params)


def shard_model(model, mesh: Mesh, *, model_parallel: bool = True, rules: Rules = DEFAULT_RULES):
  """The model with its parameters placed on `mesh` and its state partitioned.

  model_parallel=False replicates the parameters over the "model" axis (a small draft),
  while its caches still follow the batch over "data". A model without partitioning of its
  own state (a feature draft) has its parameters replicated on every device, and its state
  placed as XLA propagates it from the batch.
  """
  if "partitioning" not in {field.name for field in dataclasses.fields(model)}:
    if model_parallel:
      raise ValueError(
        f"{type(model).__name__} cannot be split over the model axis: its parameters are "
        "replicated (drop --shard-draft)"
      )
    return dataclasses.replace(
      model, params=jax.device_put(model.params, NamedSharding(mesh, PartitionSpec()))
    )
  if model_parallel:
    partitioning = Partitioning(mesh, rules)
  else:
    partitioning = Partitioning(mesh, tuple((n, None if a == "model" else a) for n, a in rules))
  params = jax.device_put(model.params, param_shardings(model.params, partitioning))
  return dataclasses.replace(model, params=params, partitioning=partitioning)


def unsplit_parameter_fraction(model, mesh_shape: Mapping[str, int]) -> float:
  """The fraction of a model's parameters that the "model" axis leaves replicated
  because it does not divide their dimension (e.g. 4 heads on model=3). 0 when model=1."""
  shapes = {
    "/".join(k.key for k in path): tuple(leaf.shape)
    for path, leaf in jax.tree_util.tree_flatten_with_path(model.params)[0]
  }
  return unsplit_fraction(shapes, mesh_shape)


def shard_batch(array, mesh: Mesh) -> jax.Array:
  """Places a [batch, ...] host array with its batch split over "data" (one process).

  Several processes: each passes its own rows to
  `jax.make_array_from_process_local_data(batch_sharding(mesh, ndim), rows)` instead.
  """
  array = np.asarray(array)
  return jax.device_put(array, batch_sharding(mesh, array.ndim))


def batch_sharding(mesh: Mesh, ndim: int) -> NamedSharding:
  return NamedSharding(mesh, PartitionSpec("data", *([None] * (ndim - 1))))


def global_prompts(
  prompts: Sequence[Sequence[int]], mesh: Mesh, pad_id: int = 0, width: int | None = None
) -> tuple[jax.Array, jax.Array, int]:
  """Token lists -> (prompts int32[batch, width], lengths int32[batch], real rows) as
  arrays whose batch is split over "data".

  Every process passes the same full list (e.g. read from the same file); each supplies
  only the rows of the shards it holds (`jax.make_array_from_callback`), so this works
  with one process or many. The batch is padded with copies of the last prompt up to a
  multiple of the "data" axis; drop rows from `real rows` on in the outputs. `width`
  (default: the longest prompt) fixes the padded length, so batches share a program.
  """
  rows = [list(p) for p in prompts]
  if not rows or min(len(r) for r in rows) < 1:
    raise ValueError("need at least one prompt, each with at least one token")
  data = mesh.shape["data"]
  real = len(rows)
  rows += [rows[-1]] * (-real % data)
  longest = max(len(r) for r in rows)
  if width is not None and width < longest:
    raise ValueError(f"width {width} is shorter than the longest prompt ({longest} tokens)")
  width = width or longest
  padded = np.full((len(rows), width), pad_id, np.int32)
  for i, row in enumerate(rows):
    padded[i, : len(row)] = row
  lengths = np.array([len(r) for r in rows], np.int32)

  def place(array):
    sharding = batch_sharding(mesh, array.ndim)
    return jax.make_array_from_callback(array.shape, sharding, lambda index: array[index])

  return place(padded), place(lengths), real


def initialize_distributed() -> None:
  """jax.distributed.initialize() for multi-host runs (Cloud TPU pod slices detect the
  coordinator themselves; elsewhere set JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES and
  JAX_PROCESS_ID)."""
  jax.distributed.initialize()
