"""Tiny random T5 and decoder-only configurations and models shared by the model tests."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from specsample.core.tree import chain_slots
from specsample.models.decoder_only import DecoderOnly, DecoderOnlyConfig
from specsample.models.t5 import T5, T5Config

T5_CONFIG = T5Config(
  vocab_size=40, d_model=32, num_heads=2, head_dim=16, mlp_dim=64,
  num_encoder_layers=1, num_decoder_layers=2, eos_id=1,
)  # fmt: skip
DECODER_CONFIG = DecoderOnlyConfig(
  vocab_size=48, d_model=32, num_heads=4, num_kv_heads=2, head_dim=8, mlp_dim=64,
  num_layers=2, eos_id=2,
)  # fmt: skip
# The target of the feature-draft, fusion and on-policy tests (tied embeddings, EOS 1, pad 0).
FEATURE_TARGET = DecoderOnlyConfig(
  vocab_size=96, d_model=32, num_heads=4, num_kv_heads=2, head_dim=8, mlp_dim=64,
  num_layers=2, tie_word_embeddings=True, eos_id=1, pad_id=0, rope_theta=1e4,
)  # fmt: skip
RAGGED = [[2, 3, 4, 2, 3], [5], [6, 7, 6, 7, 6, 7, 2, 4, 5]]  # prompts of 5, 1 and 9 tokens


def tiny_config(family: str = "t5.1.1", vocab: int = 48, **overrides) -> T5Config:
  """A 2+2-layer T5 of d_model 16: T5.1.1's gated GELU, or T5.1.0's ReLU and tied embeddings."""
  base = {
    "vocab_size": vocab,
    "d_model": 16,
    "num_heads": 2,
    "head_dim": 4,
    "mlp_dim": 24,
    "num_encoder_layers": 2,
    "num_decoder_layers": 2,
  }
  if family == "t5.1.0":
    base.update(mlp_activations=("relu",), tie_word_embeddings=True)
  else:
    base.update(mlp_activations=("gelu", "linear"), tie_word_embeddings=False)
  return T5Config(**{**base, **overrides})


def tiny_pair(vocab: int = 48, seed: int = 0) -> tuple[T5, T5]:
  """A target and a smaller draft sharing the vocabulary (random weights)."""
  target = T5.init_random(tiny_config(vocab=vocab, d_model=24, num_decoder_layers=3), seed)
  draft = T5.init_random(tiny_config("t5.1.0", vocab=vocab, d_model=8, mlp_dim=16), seed + 1)
  return target, draft


def greedy_case(family: str):
  """(target, a one-layer draft, ragged prompts) of the greedy-equality tests: a T5
  (T5_CONFIG, family "t5") or a decoder-only model (DECODER_CONFIG, "decoder_only")."""
  if family == "t5":
    target = T5.init_random(T5_CONFIG, seed=0)
    draft = T5.init_random(T5_CONFIG.replace(num_decoder_layers=1), seed=1)
    return target, draft, [[5, 6, 7, 8, 1], [9, 10, 1], [11, 12, 13, 1], [3, 1]]
  target = DecoderOnly.init_random(DECODER_CONFIG, seed=0)
  draft = DecoderOnly.init_random(DECODER_CONFIG.replace(num_layers=1), seed=3)
  return target, draft, [[5, 6, 7], [9, 10, 11, 12, 13], [14]]


def models_with_prompts():
  """[(model, two prompts padded to 4 tokens)] for a T5 (T5_CONFIG), a decoder-only model
  (DECODER_CONFIG) and a decoder-only model with a sliding window of 3."""
  t5 = T5.init_random(T5_CONFIG, seed=0)
  t5_prompts = jnp.array([[5, 6, 7, 1], [9, 10, 1, 0]], jnp.int32)
  decoder = DecoderOnly.init_random(DECODER_CONFIG, seed=0)
  window = DecoderOnly.init_random(DECODER_CONFIG.replace(sliding_window=3), seed=1)
  decoder_prompts = jnp.array([[5, 6, 7, 8], [9, 10, 0, 0]], jnp.int32)
  return [(t5, t5_prompts), (decoder, decoder_prompts), (window, decoder_prompts)]


def assert_tree_chains_score_like_plain_calls(
  model, state, pending, chains, layout, kept, following
):
  """One tree call over `pending` then the chains [batch, K, depth] depth by depth (`layout`:
  their TreeLayout or RowTrees, root first): the logits of chain j equal an `extend` over
  pending and chain j alone, and after keep_path of chain j's slots (kept [batch] tokens
  accepted) the cache continues with `following` [batch, n] as the plain call rewound to
  there does."""
  batch, num_chains, depth = chains.shape
  tokens = jnp.concatenate([pending[:, None], chains.transpose(0, 2, 1).reshape(batch, -1)], 1)
  tree_logits, tree_state = model.extend_tree(state, tokens, layout, 0)
  slots = chain_slots(num_chains, depth)
  following_lengths = jnp.array([following.shape[1]] * batch)
  for j in range(num_chains):
    chain = jnp.concatenate([pending[:, None], chains[:, j]], 1)
    plain, plain_state = model.extend(state, chain, jnp.array([depth + 1] * batch))
    np.testing.assert_allclose(tree_logits[:, slots[j]], plain, atol=2e-5, rtol=1e-5)
    path = jnp.broadcast_to(jnp.asarray(slots[j]), (batch, depth + 1))
    after_tree, _ = model.extend(
      model.keep_path(tree_state, path, kept), following, following_lengths
    )
    rewound = model.rewind(plain_state, state.end_index + kept)
    after_plain, _ = model.extend(rewound, following, following_lengths)
    np.testing.assert_allclose(after_tree, after_plain, atol=2e-5, rtol=1e-5)
