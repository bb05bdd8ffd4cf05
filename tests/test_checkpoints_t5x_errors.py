"""Broken or mismatched T5X checkpoints fail with the file named, never half-loaded."""

from __future__ import annotations

import pathlib
import shutil

import pytest

from specsample.checkpoints import CheckpointError, load_t5, read_t5x_params

FIXTURES = pathlib.Path(__file__).parent / "fixtures" / "t5x"


def test_truncated_msgpack(tmp_path):
  broken = tmp_path / "checkpoint_0"
  broken.write_bytes((FIXTURES / "test_t5_tiny.checkpoint_0").read_bytes()[:100_000])
  with pytest.raises(CheckpointError, match=r"checkpoint_0: not a readable flax msgpack"):
    load_t5(broken)


def test_missing_zarr_array(tmp_path):
  copy = tmp_path / "checkpoint_0"
  shutil.copytree(FIXTURES / "tiny_t5x_tensorstore" / "checkpoint_0", copy)
  shutil.rmtree(copy / "target.decoder.logits_dense.kernel")
  with pytest.raises(CheckpointError, match=r"target.decoder.logits_dense.kernel: cannot read"):
    load_t5(copy)


def test_corrupt_zarr_chunk(tmp_path):
  copy = tmp_path / "checkpoint_0"
  shutil.copytree(FIXTURES / "tiny_t5x_tensorstore_mp2" / "checkpoint_0", copy)
  chunk = copy / "target.token_embedder.embedding" / "1.0"
  chunk.write_bytes(b"not zstd at all")
  with pytest.raises(CheckpointError, match=r"target.token_embedder.embedding: cannot read"):
    read_t5x_params(copy)


def test_moved_checkpoint_still_reads_its_arrays(tmp_path):
  """kvstore paths are relative to the checkpoint directory, wherever it now is."""
  moved = tmp_path / "elsewhere" / "checkpoint_0"
  shutil.copytree(FIXTURES / "tiny_t5x_tensorstore" / "checkpoint_0", moved)
  assert len(read_t5x_params(moved)) == 52


def test_unknown_layout(tmp_path):
  (tmp_path / "notes.txt").write_text("hello")
  with pytest.raises(CheckpointError, match="not a T5X checkpoint"):
    load_t5(tmp_path)
  with pytest.raises(CheckpointError, match="no such file"):
    load_t5(tmp_path / "absent")


def test_config_that_does_not_fit(tmp_path):
  with pytest.raises(
    CheckpointError, match=r"test_t5_tiny.checkpoint_0 does not match .*has shape"
  ):
    load_t5(FIXTURES / "test_t5_tiny.checkpoint_0", config="t5.1.1-small")


def test_bfloat16_loading_keeps_float32_logits():
  model = load_t5(FIXTURES / "test_t5_tiny.checkpoint_0", dtype="bfloat16")
  assert model.params["decoder"]["logits_dense"]["kernel"].dtype.name == "bfloat16"
  import jax.numpy as jnp

  logits = model.forward(jnp.array([[13, 7, 1]]), jnp.array([[0, 3]]))
  assert logits.dtype == jnp.float32
