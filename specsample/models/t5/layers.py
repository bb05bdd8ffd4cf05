"""T5 building blocks in Flax linen: relative position bias, attention, MLP (RMSNorm and
the projections are the shared ones of specsample.models.layers).

Parameter names and layouts follow T5X (`t5x/examples/t5/network.py`), so T5X
checkpoints load as they are: kernels are [in, out], attention projections are flattened
to [d_model, heads * head_dim] (column h * head_dim + d is head h, dim d).

T5 specifics: RMSNorm without mean or bias (float32), no 1/sqrt(head_dim) scaling of
attention logits (folded into the initialisation), relative-position buckets (one table
per stack, shared by its layers), masks as an additive -1e10, gated-GELU with the tanh
approximation in v1.1 and ReLU in v1.0.
"""

from __future__ import annotations

import math

import flax.linen as nn
import jax
import jax.numpy as jnp

from specsample.models.layers import Projection


def relative_position_bucket(
  relative_position: jax.Array, *, bidirectional: bool, num_buckets: int, max_distance: int
) -> jax.Array:
  """T5's bucket of key_position - query_position (int32 in, int32 out, any shape)."""
  bucket = jnp.zeros_like(relative_position)
  n = -relative_position
  if bidirectional:
    num_buckets //= 2
    bucket = bucket + (n < 0).astype(jnp.int32) * num_buckets
    n = jnp.abs(n)
  else:
    n = jnp.maximum(n, 0)
  max_exact = num_buckets // 2
  is_small = n < max_exact
  log_ratio = jnp.log(n.astype(jnp.float32) / max_exact + jnp.finfo(jnp.float32).eps)
  large = max_exact + (
    log_ratio / math.log(max_distance / max_exact) * (num_buckets - max_exact)
  ).astype(jnp.int32)
  large = jnp.minimum(large, num_buckets - 1)
  return bucket + jnp.where(is_small, n, large)


class RelativePositionBias(nn.Module):
  """bias[b, h, q, k] = rel_embedding[h, bucket(key_pos[k] - query_pos[b, q])]."""

  num_heads: int
  num_buckets: int
  max_distance: int
  bidirectional: bool
  dtype: jnp.dtype = jnp.float32

  @nn.compact
  def __call__(self, query_positions: jax.Array, key_positions: jax.Array) -> jax.Array:
    """query_positions int32[batch, q], key_positions int32[k] or int32[batch, k] (per-row
    key positions: a token tree) -> float32[batch, heads, q, k]."""
    table = self.param(
      "rel_embedding",
      nn.initializers.variance_scaling(1.0, "fan_avg", "uniform"),  # as T5X
      (self.num_heads, self.num_buckets),
      self.dtype,
    )
    keys = key_positions[None, None, :] if key_positions.ndim == 1 else key_positions[:, None, :]
    relative = keys - query_positions[:, :, None]  # [batch, q, k]
    buckets = relative_position_bucket(
      relative,
      bidirectional=self.bidirectional,
      num_buckets=self.num_buckets,
      max_distance=self.max_distance,
    )
    # One-hot contraction instead of a gather: [batch, q, k, buckets] x [heads, buckets].
    one_hot = jax.nn.one_hot(buckets, self.num_buckets, dtype=jnp.float32)
    return jnp.einsum("bqkn,hn->bhqk", one_hot, table.astype(jnp.float32))


class Attention(nn.Module):
  """Multi-head attention whose keys/values may come from a cache or be precomputed."""

  num_heads: int
  head_dim: int
  d_model: int
  dtype: jnp.dtype = jnp.float32

  def setup(self):
    inner = self.num_heads * self.head_dim
    self.query = Projection(inner, dtype=self.dtype, init_scale=self.head_dim**-0.5)
    self.key = Projection(inner, dtype=self.dtype)
    self.value = Projection(inner, dtype=self.dtype)
    self.out = Projection(self.d_model, dtype=self.dtype)

  def _split_heads(self, x: jax.Array) -> jax.Array:
    return x.reshape(*x.shape[:-1], self.num_heads, self.head_dim)  # [..., heads, head_dim]

  def queries(self, x: jax.Array) -> jax.Array:
    """[batch, q, d_model] -> [batch, q, heads, head_dim]"""
    return self._split_heads(self.query(x))

  def keys_values(self, x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """[batch, k, d_model] -> keys, values [batch, k, heads, head_dim]"""
    return self._split_heads(self.key(x)), self._split_heads(self.value(x))

  def attend(
    self, queries: jax.Array, keys: jax.Array, values: jax.Array, bias: jax.Array
  ) -> jax.Array:
    """Softmax attention in float32, then the output projection.

    queries [batch, q, heads, head_dim]; keys, values [batch, k, heads, head_dim];
    bias float32 broadcastable to [batch, heads, q, k] (masks + relative positions).
    -> [batch, q, d_model]
    """
    logits = jnp.einsum("bqhd,bkhd->bhqk", queries, keys, preferred_element_type=jnp.float32)
    weights = jax.nn.softmax(logits + bias, axis=-1).astype(values.dtype)
    context = jnp.einsum("bhqk,bkhd->bqhd", weights, values)  # [batch, q, heads, head_dim]
    return self.out(context.reshape(*context.shape[:2], self.num_heads * self.head_dim))

  def __call__(self, x: jax.Array, context: jax.Array, bias: jax.Array) -> jax.Array:
    """Attention of x [batch, q, d] over context [batch, k, d]: -> [batch, q, d]."""
    keys, values = self.keys_values(context)
    return self.attend(self.queries(x), keys, values, bias)


class MLP(nn.Module):
  """T5 feed-forward: ReLU (`wi`, v1.0) or gated GELU (`wi_0` gelu x `wi_1` linear, v1.1)."""

  mlp_dim: int
  d_model: int
  activations: tuple[str, ...]
  dtype: jnp.dtype = jnp.float32

  def setup(self):
    if len(self.activations) == 1:
      self.wi = Projection(self.mlp_dim, dtype=self.dtype)
    else:
      self.wi_0 = Projection(self.mlp_dim, dtype=self.dtype)
      self.wi_1 = Projection(self.mlp_dim, dtype=self.dtype)
    self.wo = Projection(self.d_model, dtype=self.dtype)

  def __call__(self, x: jax.Array) -> jax.Array:
    """[..., d_model] -> [..., d_model]"""
    if len(self.activations) == 1:
      hidden = _activate(self.activations[0], self.wi(x))
    else:
      gate, linear = self.activations
      hidden = _activate(gate, self.wi_0(x)) * _activate(linear, self.wi_1(x))
    return self.wo(hidden)


def _activate(name: str, x: jax.Array) -> jax.Array:
  if name == "relu":
    return jax.nn.relu(x)
  if name == "gelu":
    return jax.nn.gelu(x, approximate=True)  # T5X and HF "gelu_new": the tanh approximation
  return x  # "linear"
