"""Compact weights (specsample.models.weights): bfloat16 weight matrices, float32 arithmetic.

The logits must equal, bit for bit, those of the float32 model whose weights are the same
bfloat16 numbers widened (the CPU kernel widens them in registers; XLA converts them), so
speculative greedy decoding stays identical to plain greedy decoding of that model.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tiny_models import tiny_config

from specsample import SamplingConfig, generate, speculative_generate
from specsample.models.decoder_only import DecoderOnly, DecoderOnlyConfig
from specsample.models.t5 import T5
from specsample.models.weights import weight_bytes, weight_dtype, with_weight_dtype

GREEDY = SamplingConfig(temperature=0.0)


def decoder_only(seed: int, **overrides) -> DecoderOnly:
  fields = dict(
    vocab_size=300, d_model=48, num_heads=4, num_kv_heads=2, head_dim=12, mlp_dim=96,
    num_layers=2, tie_word_embeddings=True, eos_id=1, pad_id=0,
  )  # fmt: skip
  return DecoderOnly.init_random(DecoderOnlyConfig(**{**fields, **overrides}), seed=seed)


MODELS = {
  "decoder-only tied": lambda: decoder_only(0),
  "decoder-only untied, biases": lambda: decoder_only(1, tie_word_embeddings=False, qkv_bias=True),
  "t5 v1.1": lambda: T5.init_random(tiny_config(vocab=300, d_model=32), seed=2),
  "t5 v1.0 tied": lambda: T5.init_random(tiny_config("t5.1.0", vocab=300, d_model=32), seed=3),
}


def widened(model):
  """The model with every parameter as float32 (bfloat16 ones widened, exactly)."""
  return model.replace(params=jax.tree.map(lambda a: a.astype(jnp.float32), model.params))


@pytest.mark.parametrize("name", list(MODELS))
def test_logits_equal_the_float32_model_of_the_rounded_weights(name):
  model = MODELS[name]()
  compact = with_weight_dtype(model, "bfloat16")
  assert weight_dtype(model) == "float32" and weight_dtype(compact) == "bfloat16"
  # Only weight matrices shrink: norm scales and biases stay float32.
  for leaf, small in zip(jax.tree.leaves(model.params), jax.tree.leaves(compact.params)):
    assert small.dtype == (jnp.bfloat16 if leaf.ndim >= 2 else leaf.dtype)
  assert 0.5 < weight_bytes(compact) / weight_bytes(model) < 0.52
  rng = np.random.default_rng(0)
  prompts = jnp.asarray(rng.integers(3, 300, (3, 9)), jnp.int32)
  lengths = jnp.asarray([9, 4, 7], jnp.int32)
  tokens = jnp.asarray(rng.integers(3, 300, (3, 5)), jnp.int32)

  @jax.jit
  def logits(model):
    state, _ = model.init_state(prompts, lengths, 16)
    return model.extend(state, tokens, jnp.zeros((3,), jnp.int32))[0]

  ours = np.asarray(logits(compact))
  np.testing.assert_array_equal(ours, np.asarray(logits(widened(compact))))
  # ... and close to the float32 model itself (bfloat16 rounding of the weights only).
  full = np.asarray(logits(model))
  assert 0 < np.abs(ours - full).max() < 0.05 * np.abs(full).max()


@pytest.mark.parametrize("family", ["decoder-only", "t5"])
def test_speculative_greedy_equals_plain_greedy_with_bfloat16_weights(family):
  if family == "t5":
    target = T5.init_random(tiny_config(vocab=300, d_model=32, num_decoder_layers=3), seed=4)
    draft = T5.init_random(tiny_config("t5.1.0", vocab=300, d_model=16, mlp_dim=32), seed=5)
  else:
    target, draft = decoder_only(6, num_layers=3), decoder_only(7, d_model=24, head_dim=6)
  target, draft = (with_weight_dtype(m, "bfloat16") for m in (target, draft))
  prompts = [[5, 6, 7, 8, 9], [10, 11], [12, 13, 14, 15, 16, 17, 18], [19]]
  plain = generate(target, prompts, max_new_tokens=20, sampling=GREEDY)
  spec = speculative_generate(target, draft, prompts, max_new_tokens=20, gamma=3, sampling=GREEDY)
  np.testing.assert_array_equal(np.asarray(spec.lengths), np.asarray(plain.lengths))
  np.testing.assert_array_equal(np.asarray(spec.tokens), np.asarray(plain.tokens))


def test_bad_weight_dtypes_are_refused():
  model = decoder_only(0)
  with pytest.raises(ValueError, match="must be one of"):
    with_weight_dtype(model, "float16")
  bf16_model = model.replace(
    config=DecoderOnlyConfig(**{**vars(model.config), "dtype": "bfloat16"})
  )
  with pytest.raises(ValueError, match="need a float32 model"):
    with_weight_dtype(bf16_model, "bfloat16")
  # float32 again is a no-op that widens nothing away.
  assert weight_dtype(with_weight_dtype(model, "float32")) == "float32"
