"""Resumable training: a draft's trainable parameters, its optimizer state and the step, as
one .npz of their leaves (written atomically), read back into trees of the same structure.
"""

from __future__ import annotations

import os

import jax
import numpy as np


def save_training_state(path: str, trainable, opt_state, step: int) -> None:
  """The leaves of (trainable, opt_state) as arr_0, arr_1, ... and `step` -> `path`."""
  leaves = jax.tree_util.tree_leaves((trainable, opt_state))
  np.savez(path + ".tmp.npz", *[np.asarray(x) for x in leaves], step=step)
  os.replace(path + ".tmp.npz", path)


def load_training_state(path: str, trainable, opt_state) -> tuple[object, object, int]:
  """(trainable, opt_state, step) from `path`, in the trees of the templates `trainable`
  and `opt_state` (e.g. a fresh draft's and `optimizer.init` of it)."""
  treedef = jax.tree_util.tree_structure((trainable, opt_state))
  with np.load(path) as saved:
    leaves = [saved[f"arr_{i}"] for i in range(treedef.num_leaves)]
    step = int(saved["step"])
  trainable, opt_state = jax.tree_util.tree_unflatten(treedef, leaves)
  return trainable, opt_state, step
