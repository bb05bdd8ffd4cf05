"""Tiny random T5 configurations shared by the T5 tests."""

from __future__ import annotations

from specsample.models.t5 import T5, T5Config


def tiny_config(family: str = "t5.1.1", vocab: int = 48, **overrides) -> T5Config:
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
