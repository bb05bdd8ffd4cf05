"""Parity with T5X's own network on T5X's tiny T5.1.1 checkpoint, in all three layouts.

References in tests/fixtures/t5x were computed by T5X's unmodified code (see its
README.md, SOURCE.md and LICENSE). Comparisons are at valid positions, atol 1e-4.
"""

from __future__ import annotations

import pathlib

import jax.numpy as jnp
import numpy as np
import pytest

from specsample import SamplingConfig, generate
from specsample.checkpoints import load_t5, read_t5x_params
from specsample.checkpoints.t5_params import assemble, flatten
from specsample.models.t5 import T5

FIXTURES = pathlib.Path(__file__).parent / "fixtures" / "t5x"
LAYOUTS = [
  "test_t5_tiny.checkpoint_0",
  "tiny_t5x_tensorstore/checkpoint_0",
  "tiny_t5x_tensorstore_mp2/checkpoint_0",
  "tiny_t5x_orbax/checkpoint_0",
]
ATOL = 1e-4
GREEDY = SamplingConfig(temperature=0.0)


@pytest.fixture(scope="module")
def reference():
  return dict(np.load(FIXTURES / "reference.npz"))


@pytest.fixture(scope="module")
def model() -> T5:
  return load_t5(FIXTURES / LAYOUTS[0])


def test_every_layout_loads_identical_parameters(model):
  first = read_t5x_params(FIXTURES / LAYOUTS[0])
  assert len(first) == 52
  for layout in LAYOUTS[1:]:
    other = read_t5x_params(FIXTURES / layout)
    assert sorted(other) == sorted(first), layout
    for name, array in first.items():
      assert other[name].dtype == array.dtype and np.array_equal(other[name], array), (layout, name)
  for layout in LAYOUTS:
    loaded = load_t5(FIXTURES / layout)
    assert loaded.config == model.config
    for path, leaf in flatten(loaded.params).items():
      assert np.array_equal(leaf, flatten(model.params)[path]), (layout, path)


def test_inferred_config(model):
  c = model.config
  assert (c.vocab_size, c.d_model, c.num_heads, c.head_dim, c.mlp_dim) == (32128, 8, 4, 3, 16)
  assert (c.num_encoder_layers, c.num_decoder_layers) == (2, 2)
  assert c.mlp_activations == ("gelu", "linear") and not c.tie_word_embeddings


def assert_close_at(got, want, valid):
  got, want = np.asarray(got), np.asarray(want)
  assert got.shape == want.shape
  np.testing.assert_allclose(got[valid], want[valid], atol=ATOL, rtol=0)


def test_short_batch_logits_and_encoder(model, reference):
  enc, dec_in = reference["encoder_input_tokens"], reference["decoder_input_tokens"]
  valid = reference["decoder_target_tokens"] > 0
  assert_close_at(model.forward(jnp.asarray(enc), jnp.asarray(dec_in)), reference["logits"], valid)
  assert_close_at(model.encode(jnp.asarray(enc)), reference["encoded"], enc > 0)


def test_incremental_decoding_matches_t5x_decode_mode_everywhere(model, reference):
  """Five one-token `extend` calls equal T5X's cached decode, padded positions included."""
  enc, dec_in = reference["encoder_input_tokens"], reference["decoder_input_tokens"]
  state, _ = model.init_state(jnp.asarray(enc), jnp.asarray((enc > 0).sum(1)), 8)
  steps = []
  for t in range(dec_in.shape[1]):
    logits, state = model.extend(state, jnp.asarray(dec_in[:, t : t + 1]), jnp.ones(2, jnp.int32))
    steps.append(np.asarray(logits[:, 0]))
  np.testing.assert_allclose(np.stack(steps, 1), reference["incremental_logits"], atol=ATOL)


def test_greedy_decoding_matches_t5x_temperature_sample(model, reference):
  enc = reference["encoder_input_tokens"]
  prompts = [row[row > 0].tolist() for row in enc]
  out = generate(model, prompts, max_new_tokens=8, sampling=GREEDY)
  np.testing.assert_array_equal(out.tokens, reference["greedy_tokens"])
  # The logits seen at every greedy step, and the sequence scores.
  dec_in = np.concatenate([np.zeros((2, 1), np.int32), reference["greedy_tokens"][:, :-1]], 1)
  state, _ = model.init_state(jnp.asarray(enc), jnp.asarray((enc > 0).sum(1)), 8)
  logits, _ = model.extend(state, jnp.asarray(dec_in), jnp.full((2,), 8, jnp.int32))
  np.testing.assert_allclose(logits, reference["greedy_step_logits"], atol=ATOL)
  log_probs = np.asarray(logits) - np.log(
    np.exp(np.asarray(logits, np.float64)).sum(-1, keepdims=True)
  )
  chosen = np.take_along_axis(log_probs, reference["greedy_tokens"][..., None], -1)[..., 0]
  np.testing.assert_allclose(chosen.sum(1), reference["greedy_scores"], atol=1e-3)


def test_greedy_with_an_eos_inside(model, reference):
  enc = reference["encoder_input_tokens"]
  prompts = [row[row > 0].tolist() for row in enc]
  eos_model = T5(params=model.params, config=model.config.replace(eos_id=30199))
  out = generate(eos_model, prompts, max_new_tokens=8, sampling=GREEDY)
  np.testing.assert_array_equal(out.tokens, reference["greedy_tokens_eos30199"])
  assert np.asarray(out.lengths).tolist() == [4, 8]


def test_long_batch_exercises_log_spaced_buckets(model, reference):
  enc = reference["long_encoder_input_tokens"]
  dec_in = reference["long_decoder_input_tokens"]
  valid = reference["long_decoder_target_tokens"] > 0
  assert_close_at(model.encode(jnp.asarray(enc)), reference["long_encoded"], enc > 0)
  logits = np.asarray(model.forward(jnp.asarray(enc), jnp.asarray(dec_in)))
  assert_close_at(logits[..., :256], reference["long_logits_first256"], valid)
  np.testing.assert_array_equal(logits.argmax(-1)[valid], reference["long_logits_argmax"][valid])
  logsumexp = np.log(np.exp(logits.astype(np.float64)).sum(-1))
  assert_close_at(logsumexp, reference["long_logits_logsumexp"], valid)


def test_non_trivial_norm_scales_are_routed_to_the_right_layers(model, reference):
  scales = np.load(FIXTURES / "reference_norm_scales.npz")
  flat = {"/".join(path): np.asarray(leaf) for path, leaf in flatten(model.params).items()}
  names = [name for name in scales.files if name.startswith("target.")]
  assert len(names) == 12
  for dotted in names:
    name = dotted.removeprefix("target.").replace(".", "/")
    assert name in flat, name
    flat[name] = scales[dotted]
  scaled = assemble(flat, model.config, "norm-scales")
  enc, dec_in = reference["encoder_input_tokens"], reference["decoder_input_tokens"]
  valid = reference["decoder_target_tokens"] > 0
  assert_close_at(scaled.forward(jnp.asarray(enc), jnp.asarray(dec_in)), scales["logits"], valid)
  assert_close_at(scaled.encode(jnp.asarray(enc)), scales["encoded"], enc > 0)
  # The scales matter: the unscaled model is far off.
  base = np.asarray(model.forward(jnp.asarray(enc), jnp.asarray(dec_in)))
  assert np.abs(base[valid] - scales["logits"][valid]).max() > 0.1
