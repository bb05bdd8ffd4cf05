"""A decoder-only transformer (Llama layout) behind the model contract.

Pre-norm blocks with RMSNorm, rotary position embeddings (rotate-half convention),
grouped-query attention and a SwiGLU MLP; an untied or tied output layer. The cache is
written in place at each row's own end index, like the T5 decoder's, so one `extend`
scores k tokens per row (verification of gamma draft tokens is one call).

`DecoderOnly.init_random(preset("llama-134m"))` gives a model of a realistic size for
benchmarks (speculative decoding's verify cost r on CPUs); `DecoderOnlyConfig` describes
any size.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax import struct

from specsample.models.t5.layers import MASK_BIAS, Projection, RMSNorm, dense_transposed
from specsample.models.t5.network import write_at


@dataclasses.dataclass(frozen=True)
class DecoderOnlyConfig:
  vocab_size: int = 32000
  d_model: int = 768
  num_heads: int = 12
  num_kv_heads: int = 12  # < num_heads: grouped-query attention
  head_dim: int = 64
  mlp_dim: int = 2048
  num_layers: int = 12
  rope_theta: float = 10000.0
  layer_norm_epsilon: float = 1e-5
  tie_word_embeddings: bool = False
  eos_id: int | None = 2
  pad_id: int = 0
  dtype: str = "float32"

  def __post_init__(self):
    if self.num_heads % self.num_kv_heads:
      raise ValueError(
        f"num_heads ({self.num_heads}) must be a multiple of num_kv_heads ({self.num_kv_heads})"
      )
    if self.head_dim % 2:
      raise ValueError(f"head_dim must be even for rotary embeddings, got {self.head_dim}")

  @property
  def num_parameters(self) -> int:
    d, q, kv = self.d_model, self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
    block = d * q + 2 * d * kv + q * d + 3 * d * self.mlp_dim + 2 * d
    embedding = self.vocab_size * d * (1 if self.tie_word_embeddings else 2)
    return self.num_layers * block + d + embedding


PRESETS = {
  "llama-134m": DecoderOnlyConfig(),  # 12 layers, d 768: ~134M parameters (untied)
  "llama-20m": DecoderOnlyConfig(
    d_model=256, num_heads=4, num_kv_heads=4, mlp_dim=768, num_layers=6, vocab_size=16000
  ),  # fmt: skip
}


def preset(name: str) -> DecoderOnlyConfig:
  try:
    return PRESETS[name]
  except KeyError:
    raise ValueError(f"unknown preset {name!r}; known: {sorted(PRESETS)}") from None


def rotary(x: jax.Array, positions: jax.Array, theta: float) -> jax.Array:
  """Rotary embedding of x [batch, k, heads, head_dim] at positions int32[batch, k]."""
  half = x.shape[-1] // 2
  frequencies = theta ** (-jnp.arange(half, dtype=jnp.float32) / half)  # [half]
  angles = positions[..., None].astype(jnp.float32) * frequencies  # [batch, k, half]
  cos, sin = jnp.cos(angles)[:, :, None, :], jnp.sin(angles)[:, :, None, :]
  x32 = x.astype(jnp.float32)
  first, second = x32[..., :half], x32[..., half:]
  rotated = jnp.concatenate([first * cos - second * sin, second * cos + first * sin], axis=-1)
  return rotated.astype(x.dtype)


class Block(nn.Module):
  config: DecoderOnlyConfig

  def setup(self):
    c, dtype = self.config, jnp.dtype(self.config.dtype)
    self.attention_norm = RMSNorm(c.layer_norm_epsilon, dtype)
    self.query = Projection(c.num_heads * c.head_dim, dtype=dtype)
    self.key = Projection(c.num_kv_heads * c.head_dim, dtype=dtype)
    self.value = Projection(c.num_kv_heads * c.head_dim, dtype=dtype)
    self.out = Projection(c.d_model, dtype=dtype)
    self.mlp_norm = RMSNorm(c.layer_norm_epsilon, dtype)
    self.gate = Projection(c.mlp_dim, dtype=dtype)
    self.up = Projection(c.mlp_dim, dtype=dtype)
    self.down = Projection(c.d_model, dtype=dtype)

  def __call__(self, x, positions, cache, end_index):
    """x [batch, k, d_model] at positions int32[batch, k]; cache (keys, values) each
    [batch, capacity, kv_heads, head_dim] -> (x, cache)."""
    c = self.config
    batch, k, _ = x.shape
    groups = c.num_heads // c.num_kv_heads
    h = self.attention_norm(x)
    queries = rotary(
      self.query(h).reshape(batch, k, c.num_heads, c.head_dim), positions, c.rope_theta
    )
    keys = rotary(
      self.key(h).reshape(batch, k, c.num_kv_heads, c.head_dim), positions, c.rope_theta
    )
    values = self.value(h).reshape(batch, k, c.num_kv_heads, c.head_dim)
    keys, values = write_at(cache[0], keys, end_index), write_at(cache[1], values, end_index)
    queries = queries.reshape(batch, k, c.num_kv_heads, groups, c.head_dim)
    logits = jnp.einsum("bqhgd,bshd->bhgqs", queries, keys, preferred_element_type=jnp.float32) * (
      c.head_dim**-0.5
    )  # [batch, kv_heads, groups, k, capacity]
    key_positions = jnp.arange(keys.shape[1], dtype=jnp.int32)
    allowed = key_positions[None, None, :] <= positions[:, :, None]  # [batch, k, capacity]
    logits = logits + jnp.where(allowed, 0.0, MASK_BIAS)[:, None, None]
    weights = jax.nn.softmax(logits, axis=-1).astype(values.dtype)
    context = jnp.einsum("bhgqs,bshd->bqhgd", weights, values)
    x = x + self.out(context.reshape(batch, k, c.num_heads * c.head_dim))
    h = self.mlp_norm(x)
    x = x + self.down(jax.nn.silu(self.gate(h)) * self.up(h))
    return x, (keys, values)


class DecoderOnlyNetwork(nn.Module):
  config: DecoderOnlyConfig

  def setup(self):
    c, dtype = self.config, jnp.dtype(self.config.dtype)
    self.embed = nn.Embed(c.vocab_size, c.d_model, dtype=dtype, param_dtype=dtype)
    self.blocks = [Block(c) for _ in range(c.num_layers)]
    self.final_norm = RMSNorm(c.layer_norm_epsilon, dtype)
    if not c.tie_word_embeddings:
      self.lm_head = Projection(c.vocab_size, dtype=dtype)

  def __call__(self, tokens, positions, caches, end_index):
    """tokens, positions int32[batch, k] -> (logits float32[batch, k, vocab], caches)."""
    x = self.embed(tokens)
    new_caches = []
    for block, cache in zip(self.blocks, caches, strict=True):
      x, cache = block(x, positions, cache, end_index)
      new_caches.append(cache)
    x = self.final_norm(x)
    if self.config.tie_word_embeddings:
      logits = dense_transposed(x, self.embed.embedding)
    else:
      logits = self.lm_head(x)
    return logits.astype(jnp.float32), tuple(new_caches)


@struct.dataclass
class DecoderOnlyState:
  caches: tuple[tuple[jax.Array, jax.Array], ...]  # per layer: [batch, capacity, kv, hd] x2
  end_index: jax.Array  # int32[batch]


@struct.dataclass
class DecoderOnly:
  """A decoder-only language model with its parameters (the model contract)."""

  params: Any
  config: DecoderOnlyConfig = struct.field(pytree_node=False)
  # Optional, static: `constrain(array, logical_axes)` (specsample.scaling.Partitioning).
  partitioning: Any = struct.field(pytree_node=False, default=None)

  @classmethod
  def init_random(cls, config: DecoderOnlyConfig, seed: int = 0) -> DecoderOnly:
    """Random parameters (for tests and benchmarks)."""
    tokens = jnp.zeros((1, 1), jnp.int32)
    caches = _empty_caches(config, 1, 1)
    params = DecoderOnlyNetwork(config).init(
      jax.random.key(seed), tokens, tokens, caches, jnp.zeros((1,), jnp.int32)
    )["params"]
    return cls(params=params, config=config)

  @property
  def vocab_size(self) -> int:
    return self.config.vocab_size

  @property
  def eos_id(self) -> int | None:
    return self.config.eos_id

  @property
  def pad_id(self) -> int:
    return self.config.pad_id

  def _run(self, caches, tokens, end_index):
    positions = end_index[:, None] + jnp.arange(tokens.shape[1], dtype=jnp.int32)
    logits, caches = DecoderOnlyNetwork(self.config).apply(
      {"params": self.params}, tokens, positions, caches, end_index
    )
    if self.partitioning is not None:
      axes = ("batch", "length", "kv_heads", "head_dim")
      caches = tuple(
        (self.partitioning.constrain(k, axes), self.partitioning.constrain(v, axes))
        for k, v in caches
      )
    return logits, caches

  def init_state(
    self, prompts: jax.Array, prompt_lengths: jax.Array, num_new_positions: int
  ) -> tuple[DecoderOnlyState, jax.Array]:
    """Prefills every prompt token but the last, which is returned as the pending token."""
    batch, length = prompts.shape
    caches = _empty_caches(self.config, batch, length + num_new_positions)
    start = jnp.zeros((batch,), jnp.int32)
    _, caches = self._run(caches, prompts, start)  # positions past a row's end are stale
    pending = jnp.take_along_axis(prompts, (prompt_lengths - 1)[:, None], axis=1)[:, 0]
    state = DecoderOnlyState(caches=caches, end_index=(prompt_lengths - 1).astype(jnp.int32))
    return state, pending.astype(jnp.int32)

  def extend(
    self, state: DecoderOnlyState, tokens: jax.Array, num_valid: jax.Array
  ) -> tuple[jax.Array, DecoderOnlyState]:
    logits, caches = self._run(state.caches, tokens, state.end_index)
    return logits, state.replace(caches=caches, end_index=state.end_index + num_valid)

  def rewind(self, state: DecoderOnlyState, end_index: jax.Array) -> DecoderOnlyState:
    return state.replace(end_index=end_index.astype(jnp.int32))


def _empty_caches(config: DecoderOnlyConfig, batch: int, capacity: int):
  shape = (batch, capacity, config.num_kv_heads, config.head_dim)
  dtype = jnp.dtype(config.dtype)
  return tuple((jnp.zeros(shape, dtype), jnp.zeros(shape, dtype)) for _ in range(config.num_layers))
