"""Resumable training: a draft's trainable parameters, its optimizer state and the step, as
one .npz of their leaves (written atomically), read back into trees of the same structure.

In float32 a resumed run goes on exactly as an uninterrupted one would. In bfloat16 (a
checkpoint half the size, for a training run committed to the repository) the floating
leaves are rounded to bfloat16 and read back into the templates' dtypes.
"""

from __future__ import annotations

import os

import jax
import ml_dtypes
import numpy as np

CHECKPOINT_DTYPES = ("float32", "bfloat16")


def save_training_state(path: str, trainable, opt_state, step: int, dtype: str = "float32") -> None:
  """The leaves of (trainable, opt_state) as arr_0, arr_1, ... and `step` -> `path`;
  dtype "bfloat16": floating leaves rounded to bfloat16 (kept as their uint16 bits, their
  indices in `bfloat16_leaves`)."""
  if dtype not in CHECKPOINT_DTYPES:
    raise ValueError(f"checkpoint dtype must be one of {CHECKPOINT_DTYPES}, got {dtype!r}")
  leaves = [np.asarray(x) for x in jax.tree_util.tree_leaves((trainable, opt_state))]
  rounded = []
  if dtype == "bfloat16":
    for i, leaf in enumerate(leaves):
      if np.issubdtype(leaf.dtype, np.floating):
        leaves[i] = leaf.astype(ml_dtypes.bfloat16).view(np.uint16)
        rounded.append(i)
  np.savez(path + ".tmp.npz", *leaves, step=step, bfloat16_leaves=np.asarray(rounded, np.int32))
  os.replace(path + ".tmp.npz", path)


def load_training_state(path: str, trainable, opt_state) -> tuple[object, object, int]:
  """(trainable, opt_state, step) from `path`, in the trees of the templates `trainable`
  and `opt_state` (e.g. a fresh draft's and `optimizer.init` of it)."""
  treedef = jax.tree_util.tree_structure((trainable, opt_state))
  templates = jax.tree_util.tree_leaves((trainable, opt_state))
  with np.load(path) as saved:
    leaves = [saved[f"arr_{i}"] for i in range(treedef.num_leaves)]
    step = int(saved["step"])
    rounded = saved["bfloat16_leaves"].tolist() if "bfloat16_leaves" in saved.files else []
  for i in rounded:
    leaves[i] = leaves[i].view(ml_dtypes.bfloat16).astype(np.asarray(templates[i]).dtype)
  trainable, opt_state = jax.tree_util.tree_unflatten(treedef, leaves)
  return trainable, opt_state, step
