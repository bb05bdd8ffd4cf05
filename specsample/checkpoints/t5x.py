"""T5X checkpoints, read without t5x: the parameters (`target`) only.

Three on-disk layouts, local or on `gs://` (through tensorstore):
  A. legacy single file: flax msgpack `{"version", "optimizer": {"target", "state"}}`;
  B. legacy directory: msgpack `checkpoint` in which partitioned arrays are TensorStore
     zarr specs (gzip or zstd, one or several chunks) stored in folders beside it;
  C. Orbax (OCDBT): `checkpoint_N/state/` (or the `state` folder itself), pytree
     `{"target", "state"}`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import numpy as np
from flax import serialization

from specsample.checkpoints.errors import CheckpointError
from specsample.checkpoints.t5_params import flatten


def _is_remote(path: str) -> bool:
  return path.startswith("gs://")


def _kvstore_spec(directory: str) -> dict:
  """A tensorstore kvstore for a local or gs:// directory (trailing slash included)."""
  if _is_remote(directory):
    bucket, _, prefix = directory[len("gs://") :].partition("/")
    return {"driver": "gcs", "bucket": bucket, "path": prefix.rstrip("/") + "/"}
  return {"driver": "file", "path": os.path.abspath(directory).rstrip("/") + "/"}


def _read_bytes(path: str) -> bytes:
  if not _is_remote(path):
    with open(path, "rb") as f:
      return f.read()
  import tensorstore as ts

  directory, name = path.rsplit("/", 1)
  store = ts.KvStore.open(_kvstore_spec(directory)).result()
  result = store.read(name).result()
  if result.state != "value":
    raise CheckpointError(f"{path}: file not found")
  return bytes(result.value)


def _exists(path: str) -> bool:
  if not _is_remote(path):
    return os.path.exists(path)
  try:
    _read_bytes(path)
    return True
  except Exception:  # noqa: BLE001 - any failure to read means "not there" for layout detection
    return False


def detect_layout(path: str) -> str:
  """'msgpack', 'tensorstore' or 'orbax'; CheckpointError if it is none of them."""
  path = str(path).rstrip("/")
  if not _is_remote(path) and os.path.isfile(path):
    return "msgpack"
  if _exists(f"{path}/checkpoint"):
    return "tensorstore"
  if _exists(f"{path}/state/_METADATA") or _exists(f"{path}/_METADATA"):
    return "orbax"
  raise CheckpointError(
    f"{path}: not a T5X checkpoint (expected a msgpack file, a directory with a `checkpoint` "
    "file, or an Orbax directory with `state/_METADATA`)"
  )


def _restore_msgpack(data: bytes, source: str) -> dict:
  try:
    return serialization.msgpack_restore(data)
  except Exception as error:  # noqa: BLE001 - msgpack raises many kinds of errors on bad data
    raise CheckpointError(f"{source}: not a readable flax msgpack checkpoint ({error})") from error


def _target(tree: Mapping, source: str) -> Mapping:
  for keys in (("optimizer", "target"), ("target",)):
    node = tree
    for key in keys:
      node = node.get(key) if isinstance(node, Mapping) else None
    if isinstance(node, Mapping):
      return node
  raise CheckpointError(f"{source}: no parameters (`optimizer/target` or `target`) inside")


def _is_tensorstore_spec(leaf) -> bool:
  return isinstance(leaf, Mapping) and "driver" in leaf and "kvstore" in leaf


def _read_tensorstore_array(spec: Mapping, checkpoint_dir: str, name: str) -> np.ndarray:
  """Opens a zarr array of a legacy T5X directory, relative to wherever the directory is now."""
  import tensorstore as ts

  # Whatever the writer's kvstore was (file, gfile, gcs; absolute or relative), the array's
  # folder is the last path component and lives beside `checkpoint`.
  raw_path = (spec.get("kvstore") or {}).get("path") or spec.get("path") or ""
  parts = [part for part in raw_path.split("/") if part]
  if not parts:
    raise CheckpointError(f"{checkpoint_dir}: array {name} has a spec without a path: {spec}")
  folder = parts[-1]
  base = _kvstore_spec(checkpoint_dir)
  array_spec = {key: value for key, value in spec.items() if key not in ("kvstore", "path")}
  array_spec["kvstore"] = {**base, "path": base["path"] + folder + "/"}
  try:
    return np.asarray(ts.open(array_spec).result().read().result())
  except Exception as error:  # noqa: BLE001 - tensorstore errors carry the useful message
    raise CheckpointError(
      f"{checkpoint_dir}/{folder}: cannot read array {name} ({error})"
    ) from error


def _read_orbax(path: str) -> Mapping:
  import jax
  import orbax.checkpoint as ocp

  state_dir = f"{path}/state" if _exists(f"{path}/state/_METADATA") else path
  if not _is_remote(state_dir):
    state_dir = os.path.abspath(state_dir)  # orbax needs an absolute path for its metadata
  checkpointer = ocp.PyTreeCheckpointer()
  try:
    tree = checkpointer.metadata(state_dir).item_metadata.tree
  except Exception as error:  # noqa: BLE001
    raise CheckpointError(f"{state_dir}: unreadable Orbax metadata ({error})") from error
  if "target" not in tree:
    raise CheckpointError(f"{state_dir}: Orbax checkpoint without a `target` tree")
  # Restore only the parameters, as numpy arrays, whatever devices wrote them.
  target_only = {"target": tree["target"]}
  restore_args = jax.tree_util.tree_map(
    lambda _: ocp.RestoreArgs(restore_type=np.ndarray), target_only
  )
  try:
    restored = checkpointer.restore(
      state_dir,
      args=ocp.args.PyTreeRestore(
        item=target_only, restore_args=restore_args, partial_restore=True
      ),
    )
  except Exception as error:  # noqa: BLE001
    raise CheckpointError(f"{state_dir}: cannot restore the Orbax checkpoint ({error})") from error
  return restored["target"]


def read_t5x_params(path: str | os.PathLike) -> dict[str, np.ndarray]:
  """The parameters of a T5X checkpoint as {"encoder/layers_0/...": array} (T5X names)."""
  path = str(path).rstrip("/")
  layout = detect_layout(path)
  if layout == "msgpack":
    target = _target(_restore_msgpack(_read_bytes(path), path), path)
  elif layout == "tensorstore":
    source = f"{path}/checkpoint"
    target = _target(_restore_msgpack(_read_bytes(source), source), source)
    target = {
      "/".join(keys): _read_tensorstore_array(leaf, path, ".".join(("target", *keys)))
      if _is_tensorstore_spec(leaf)
      else leaf
      for keys, leaf in _flatten_specs(target).items()
    }
    return {name: np.asarray(array) for name, array in target.items()}
  else:
    target = _read_orbax(path)
  return {"/".join(keys): np.asarray(leaf) for keys, leaf in flatten(target).items()}


def _flatten_specs(tree: Mapping, prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], object]:
  """Like flatten(), but a TensorStore spec dict is a leaf, not a subtree."""
  flat = {}
  for key, value in tree.items():
    if isinstance(value, Mapping) and not _is_tensorstore_spec(value):
      flat.update(_flatten_specs(value, (*prefix, str(key))))
    else:
      flat[(*prefix, str(key))] = value
  return flat
