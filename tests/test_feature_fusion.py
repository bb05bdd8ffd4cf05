"""Feature drafts that fuse several target layers (EAGLE-3): the target's wide features,
the draft's reduction, `with_fusion`, checkpoints, pairs, exactness and training."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tiny_models import FEATURE_TARGET, RAGGED

from specsample import SamplingConfig, generate, speculative_generate
from specsample.checkpoints.errors import CheckpointError
from specsample.checkpoints.feature_draft import (
  feature_target,
  load_feature_draft,
  save_feature_draft,
)
from specsample.models import DecoderOnly, FeatureDraft
from specsample.models.feature_draft import with_fusion
from specsample.models.lookup_draft import LookupThenModel
from specsample.train import distill_features as df
from specsample.train.target_responses import generate_responses

TARGET = FEATURE_TARGET.replace(num_layers=3)
GREEDY = SamplingConfig(temperature=0.0)
LAYERS = (0, 1)


@pytest.fixture(scope="module")
def target():
  return DecoderOnly.init_random(TARGET, seed=1)


@pytest.fixture(scope="module")
def draft(target):
  """A draft of 48 kept tokens whose reduction is random (not `with_fusion`'s start), so
  every slice of the target's features changes its proposals."""
  ids = np.arange(1, 49, dtype=np.int32)
  made = df.draft_for_target(target, ids, seed=3, feature_layers=LAYERS)
  kernel = jax.random.normal(jax.random.key(4), (3 * 32, 32)) / np.sqrt(3 * 32)
  return FeatureDraft(params={**made.params, "reduce": {"kernel": kernel}}, config=made.config)


def _features(model, tokens):
  lengths = jnp.full((tokens.shape[0],), tokens.shape[1], jnp.int32)
  return model.init_state_with_features(tokens, lengths, 0)[2]  # [batch, length, width]


def test_the_targets_features_carry_its_layers_outputs_before_the_final_state(target):
  tokens = jnp.asarray([[2, 9, 4, 7, 5, 3]], jnp.int32)
  plain = _features(target, tokens)  # [1, 6, 32]
  wide = _features(target.with_feature_layers(LAYERS), tokens)
  assert target.feature_size == 32 and wide.shape == (1, 6, 96)
  np.testing.assert_array_equal(wide[..., 64:], plain)  # the final-normed state, last
  # Layer l's output is what the layers after it continue from: a model of the first l + 1
  # layers normalises it into its own final state.
  for slot, layer in enumerate(LAYERS):
    params = {k: v for k, v in target.params.items() if not k.startswith("blocks_")}
    params.update({f"blocks_{i}": target.params[f"blocks_{i}"] for i in range(layer + 1)})
    first = DecoderOnly(params=params, config=TARGET.replace(num_layers=layer + 1))
    output = wide[..., 32 * slot : 32 * (slot + 1)]
    assert not np.allclose(output, plain, atol=0.1)
    normed = first.with_feature_layers((layer,))
    np.testing.assert_allclose(_features(normed, tokens)[..., :32], output, rtol=1e-6, atol=1e-6)
  with pytest.raises(ValueError, match="layers 0..2"):
    target.with_feature_layers((3,))


def test_with_fusion_starts_as_the_draft_it_extends(target):
  plain_draft = df.draft_for_target(target, np.arange(1, 49, dtype=np.int32), seed=5)
  fused = with_fusion(plain_draft, LAYERS)
  assert (plain_draft.feature_size, fused.feature_size) == (32, 96)
  tokens = jnp.asarray([[2, 9, 4, 7, 5, 3], [4, 4, 8, 1, 2, 6]], jnp.int32)
  expected = plain_draft.forward(tokens, _features(target, tokens))
  got = fused.forward(tokens, _features(target.with_feature_layers(LAYERS), tokens))
  for a, b in zip(expected, got, strict=True):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
  with pytest.raises(ValueError, match="already"):
    with_fusion(fused, LAYERS)


def test_the_draft_reads_the_layer_outputs(target, draft):
  """Changing an intermediate layer's slice of the features changes the proposals."""
  tokens = jnp.asarray([[2, 9, 4, 7, 5, 3]], jnp.int32)
  features = _features(target.with_feature_layers(LAYERS), tokens)
  changed = features.at[..., :32].multiply(-1.0)
  assert not np.allclose(draft.forward(tokens, features)[1], draft.forward(tokens, changed)[1])
  with pytest.raises(ValueError, match="32 or 96 wide"):
    draft.forward(tokens, features[..., :64])


def test_greedy_output_equals_the_targets(target, draft):
  plain = generate(target, RAGGED, max_new_tokens=16, sampling=GREEDY)
  wide = feature_target(target, draft)
  assert wide.config.feature_layers == LAYERS
  for candidate in (draft, LookupThenModel.for_target(draft, wide)):
    for gamma in (1, 4):
      spec = speculative_generate(wide, candidate, RAGGED, gamma=gamma, max_new_tokens=16,
                                  sampling=GREEDY)  # fmt: skip
      assert spec.sequences() == plain.sequences()
  for candidate in (draft, LookupThenModel.for_target(draft, wide)):  # the target's layers
    with pytest.raises(ValueError, match=r"width 96.*with_feature_layers\(\(0, 1\)\)"):
      speculative_generate(target, candidate, RAGGED, max_new_tokens=4)


def test_fused_drafts_are_saved_with_their_layers(target, draft, tmp_path):
  save_feature_draft(draft, tmp_path / "draft", dtype="float32")
  loaded = load_feature_draft(tmp_path / "draft", target)
  assert loaded.config.feature_layers == LAYERS
  tokens = jnp.asarray([[2, 5, 7, 9]], jnp.int32)
  features = jax.random.normal(jax.random.key(0), (1, 4, 96))
  expected = draft.forward(tokens, features)[0]
  np.testing.assert_array_equal(loaded.forward(tokens, features)[0], expected)
  shallow = DecoderOnly.init_random(TARGET.replace(num_layers=1), seed=0)
  with pytest.raises(CheckpointError, match=r"layers \(0, 1\), this target has 1"):
    load_feature_draft(tmp_path / "draft", shallow)


def test_training_reads_the_wide_features_and_regresses_the_final_state(target, draft):
  wide = target.with_feature_layers(LAYERS)
  rng = np.random.default_rng(0)
  prompts = [rng.integers(2, 96, rng.integers(3, 9)).tolist() for _ in range(24)]
  responses = generate_responses(wide, prompts, max_new_tokens=16, features=True, k=0)
  assert responses[0].features.shape[-1] == 96
  sequences = [
    df.FeatureSequence(tokens=np.asarray(r.prompt + r.tokens, np.int32), features=r.features,
                       prompt_length=len(r.prompt), task="chat", temperature=0.0, index=i)
    for i, r in enumerate(responses)
  ]  # fmt: skip
  before = df.agreement(draft, sequences, steps=2)
  stream = df.batches(sequences, 256, seed=0, bucket=32)
  settings = df.FeatureDistillSettings(
    steps=60, learning_rate=3e-3, warmup_steps=5, log_every=20, steps_ahead=2
  )
  trained, _, log = df.train(draft, lambda: next(stream), settings)
  after = df.agreement(trained, sequences, steps=2)
  assert log[-1][1] < 0.9 * log[0][1]
  assert after["greedy"] > before["greedy"] + 0.1  # ~0.01 -> ~0.15 on these sequences
  assert not np.allclose(trained.params["reduce"]["kernel"], draft.params["reduce"]["kernel"])
