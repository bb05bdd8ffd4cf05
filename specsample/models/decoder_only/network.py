"""The decoder-only network (Flax linen): pre-norm blocks with RMSNorm, rotary position
embeddings (rotate-half convention, as Hugging Face's Llama), grouped-query attention,
a SwiGLU MLP, and a tied or untied output layer. Gemma 3's options (config): local
sliding-window layers with their own rotary base, norms after attention and MLP
(`post_attention_norm`, `post_mlp_norm`), RMSNorm times (1 + scale), scaled embeddings,
a GELU-tanh MLP and its query scale; such layers never take the fused 8-bit layer kernel.

The cache (models.kv_cache) is written in place at each row's own end index, so one call
scores k tokens per row (verification of gamma draft tokens is one call). Parameter names: `embed`,
`blocks_{i}/{attention_norm, query, key, value, out, query_norm, key_norm, mlp_norm,
gate, up, down}`, `final_norm`, `lm_head` (and `output_ids` for a reduced output layer);
kernels are [in, out].
"""

from __future__ import annotations

import math

import flax.linen as nn
import jax
import jax.numpy as jnp

from specsample.kernels import decoder_layer
from specsample.kernels.attention import cached_attention, ends_of
from specsample.models import kv_cache
from specsample.models.decoder_only.config import DecoderOnlyConfig
from specsample.models.kv_cache import KeysValues, causal_mask
from specsample.models.layers import (
  Embed,
  Projection,
  RMSNorm,
  dense_transposed,
  lookup,
  rounded,
)


def rotary_tables(positions: jax.Array, frequencies) -> tuple[jax.Array, jax.Array]:
  """cos and sin of positions int32[batch, k] times frequencies float32[head_dim // 2], in
  float32 (as transformers computes them).  -> ([batch, k, half], [batch, k, half])."""
  angles = positions[..., None].astype(jnp.float32) * jnp.asarray(frequencies)  # [batch, k, half]
  angles = rounded(angles)  # before cos and sin's own sums (`layers.rounded`)
  return jnp.cos(angles), jnp.sin(angles)


def rotary(x: jax.Array, positions: jax.Array, frequencies) -> jax.Array:
  """Rotary embedding of x [batch, k, heads, head_dim] at positions int32[batch, k].

  frequencies: float32[head_dim // 2] (DecoderOnlyConfig.rotary_frequencies), or a
  number, the base theta of the default frequencies theta^(-2i / head_dim).
  """
  half = x.shape[-1] // 2
  if isinstance(frequencies, int | float):
    frequencies = DecoderOnlyConfig(head_dim=2 * half, rope_theta=frequencies).rotary_frequencies()
  # The rotation in float32, or float64 for a float64 model.
  wide = jnp.promote_types(x.dtype, jnp.float32)
  cos, sin = (table[:, :, None, :].astype(wide) for table in rotary_tables(positions, frequencies))
  x32 = x.astype(wide)
  first, second = x32[..., :half], x32[..., half:]
  # Each product rounded before the sum (`layers.rounded`): the same numbers for any
  # number of tokens per call.
  first_cos, second_sin = rounded(first * cos), rounded(second * sin)
  second_cos, first_sin = rounded(second * cos), rounded(first * sin)
  rotated = jnp.concatenate([first_cos - second_sin, second_cos + first_sin], axis=-1)
  return rotated.astype(x.dtype)


def attention_mask(positions: jax.Array, capacity: int, window: int | None) -> jax.Array:
  """Which cache positions each query may see.  int32[batch, k] -> bool[batch, k, capacity]
  (`kv_cache.causal_mask`: causal, within the last `window` positions if given)."""
  return causal_mask(positions, capacity, window)


def norm(config: DecoderOnlyConfig) -> nn.Module:
  """The config's RMSNorm (times scale, or times 1 + scale for Gemma)."""
  plus_one = config.gemma is not None
  return RMSNorm(config.layer_norm_epsilon, jnp.dtype(config.dtype), plus_one)


def _activation(config: DecoderOnlyConfig):
  """The MLP's gate: tanh-approximated GELU for Gemma (GeGLU), else SiLU (SwiGLU)."""
  if config.gemma is not None:
    return lambda x: jax.nn.gelu(x, approximate=True)
  return jax.nn.silu


class Block(nn.Module):
  config: DecoderOnlyConfig
  layer: int = 0  # its index: local (sliding-window) or global for Gemma-style configs

  def setup(self):
    c, dtype = self.config, jnp.dtype(self.config.dtype)
    self.attention_norm = norm(c)
    self.query = Projection(c.num_heads * c.head_dim, dtype=dtype, use_bias=c.qkv_bias)
    self.key = Projection(c.num_kv_heads * c.head_dim, dtype=dtype, use_bias=c.qkv_bias)
    self.value = Projection(c.num_kv_heads * c.head_dim, dtype=dtype, use_bias=c.qkv_bias)
    self.out = Projection(c.d_model, dtype=dtype, use_bias=c.out_bias)
    if c.qk_norm:
      self.query_norm = norm(c)
      self.key_norm = norm(c)
    if c.gemma is not None:  # norms after the attention and the MLP
      self.post_attention_norm = norm(c)
      self.post_mlp_norm = norm(c)
    self.mlp_norm = norm(c)
    self.gate = Projection(c.mlp_dim, dtype=dtype, use_bias=c.mlp_bias)
    self.up = Projection(c.mlp_dim, dtype=dtype, use_bias=c.mlp_bias)
    self.down = Projection(c.d_model, dtype=dtype, use_bias=c.mlp_bias)

  def __call__(self, x, positions, cache: KeysValues, end_index, allowed, ends=None):
    """x [batch, k, d_model] at positions int32[batch, k], written at end_index, seeing
    the cache entries allowed bool[batch, k, capacity] (ends: `attention.ends_of(allowed)`)
    -> (x, cache). cache: this layer's keys and values [batch, capacity, kv_heads,
    head_dim] (a `KeysValues`, or a (keys, values) pair)."""
    c = self.config
    batch, k, _ = x.shape
    cache = KeysValues(*cache)
    params = self.variables.get("params", {})
    if c.llama_layers and decoder_layer.applies(c, params):
      return self._int8_layer(params, x, positions, cache, end_index, allowed, ends)
    frequencies = c.layer_rotary_frequencies(self.layer)
    h = self.attention_norm(x)
    queries = self.query(h).reshape(batch, k, c.num_heads, c.head_dim)
    keys = self.key(h).reshape(batch, k, c.num_kv_heads, c.head_dim)
    if c.qk_norm:
      queries, keys = self.query_norm(queries), self.key_norm(keys)
    queries, keys = rotary(queries, positions, frequencies), rotary(keys, positions, frequencies)
    values = self.value(h).reshape(batch, k, c.num_kv_heads, c.head_dim)
    cache = cache.write(keys, values, end_index)  # [batch, capacity, kv_heads, head_dim]
    # [batch, k, heads, head_dim] over the cache entries each query sees
    context = cached_attention(queries, *cache, allowed, c.attention_scale, ends)
    attended = self.out(context.reshape(batch, k, c.num_heads * c.head_dim))
    # A post-norm ends in a product: rounded before the residual sum (`layers.rounded`)
    x = x + (rounded(self.post_attention_norm(attended)) if c.gemma is not None else attended)
    h = self.mlp_norm(x)
    mlp = self.down(_activation(c)(self.gate(h)) * self.up(h))
    x = x + (rounded(self.post_mlp_norm(mlp)) if c.gemma is not None else mlp)
    return x, cache

  def _int8_layer(self, params, x, positions, cache: KeysValues, end_index, allowed, ends):
    """The layer as two kernel calls (kernels.decoder_layer) around the cache write."""
    c = self.config
    batch, k, _ = x.shape
    kernel = {name: params[name]["kernel"] for name in decoder_layer.PROJECTIONS}
    cos, sin = rotary_tables(positions, c.rotary_frequencies())
    queries, keys, values = decoder_layer.int8_qkv(
      x, params["attention_norm"]["scale"], kernel["query"], kernel["key"], kernel["value"],
      cos, sin, c.layer_norm_epsilon,
    )  # fmt: skip
    shape = (batch, k, c.num_kv_heads, c.head_dim)
    cache = cache.write(keys.reshape(shape), values.reshape(shape), end_index)
    if ends is None:
      ends = ends_of(allowed)
    keys, values = cache  # bfloat16 numbers' bits, read as bfloat16 (kv_cache.storage_dtype)
    x = decoder_layer.int8_attention_mlp(
      x, queries, keys, values, allowed, ends, kernel["out"], params["mlp_norm"]["scale"],
      kernel["gate"], kernel["up"], kernel["down"], c.head_dim**-0.5, c.layer_norm_epsilon,
    )  # fmt: skip
    return x, cache


class DecoderOnlyNetwork(nn.Module):
  config: DecoderOnlyConfig

  def setup(self):
    c, dtype = self.config, jnp.dtype(self.config.dtype)
    self.embed = Embed(c.vocab_size, c.d_model, dtype=dtype, param_dtype=dtype)
    self.blocks = [Block(c, layer) for layer in range(c.num_layers)]
    self.final_norm = norm(c)
    if c.output_vocab_size is not None:
      self.lm_head = Projection(c.output_vocab_size, dtype=dtype)
      self.output_ids = self.param(
        "output_ids",
        lambda _, shape: jnp.arange(shape[0], dtype=jnp.int32),
        (c.output_vocab_size,),
      )
    elif not c.tie_word_embeddings:
      self.lm_head = Projection(c.vocab_size, dtype=dtype)

  def __call__(
    self, tokens, positions, caches, end_index, allowed=None, with_features=False,
    key_positions=None,
  ):  # fmt: skip
    """tokens, positions int32[batch, k] -> (logits float32[batch, k, vocab], caches), and
    with_features the features third: the final-normed hidden states [batch, k, d_model]
    (the output layer's input: what a feature-level draft reads), after the outputs of
    config.feature_layers when it names any ([batch, k, config.feature_size]).

    allowed bool[batch, k, capacity]: the cache entries each token sees (None: causal by
    position, within the sliding window if any). Local layers (config.local_layers) see
    those of them within their window, by key_positions int32[batch, capacity] (each
    entry's position: tree slots sit at their depth; None: entry i at position i).
    """
    c = self.config
    capacity = caches[0][0].shape[1]
    if allowed is None:
      allowed = causal_mask(positions, capacity, c.sliding_window)
    ends = ends_of(allowed)  # [batch, k]: what each query reads of the caches
    masks = {False: (allowed, ends)}
    if c.local_layers:
      if key_positions is None:
        key_positions = jnp.arange(capacity, dtype=jnp.int32)[None, :]  # [1, capacity]
      recent = key_positions[:, None, :] > positions[:, :, None] - c.gemma.local_window
      local = allowed & recent  # [batch, k, capacity]
      masks[True] = (local, ends_of(local))
    x = lookup(self.embed, tokens, jnp.dtype(c.dtype))
    if c.gemma is not None:  # sqrt(d_model) in the model's dtype, as transformers' Gemma
      x = rounded(x * jnp.asarray(math.sqrt(c.d_model), jnp.float32).astype(x.dtype))
    new_caches, layer_outputs = [], []
    for layer, (block, cache) in enumerate(zip(self.blocks, caches, strict=True)):
      x, cache = block(x, positions, cache, end_index, *masks[c.is_local(layer)])
      new_caches.append(cache)
      if with_features and layer in c.feature_layers:
        layer_outputs.append(x)
    x = self.final_norm(x)
    if self.config.tie_word_embeddings:
      logits = dense_transposed(x, self.embed.embedding)
    elif self.config.output_vocab_size is not None:  # [batch, k, output_vocab] -> full vocab
      kept = self.lm_head(x)
      logits = jnp.full((*kept.shape[:-1], self.config.vocab_size), -jnp.inf, kept.dtype)
      logits = logits.at[..., self.output_ids].set(kept)
    else:
      logits = self.lm_head(x)
    # float32 logits (float64 when the model computes in float64, for reference checks)
    logits = logits.astype(jnp.promote_types(logits.dtype, jnp.float32))
    if with_features:  # [batch, k, d_model * (len(feature_layers) + 1)]
      return logits, tuple(new_caches), jnp.concatenate([*layer_outputs, x], axis=-1)
    return logits, tuple(new_caches)


def empty_caches(config: DecoderOnlyConfig, batch: int, capacity: int) -> tuple[KeysValues, ...]:
  """Zeroed caches: per layer keys and values, each [batch, capacity, kv_heads, head_dim],
  in `config.cache_dtype` (None: the model's dtype; bfloat16 kept as its bits,
  `kv_cache.storage_dtype`)."""
  c = config
  dtype = kv_cache.storage_dtype(c.cache_dtype) if c.cache_dtype else jnp.dtype(c.dtype)
  return kv_cache.zeros(c.num_layers, batch, capacity, c.num_kv_heads, c.head_dim, dtype)


def init_params(config: DecoderOnlyConfig, key: jax.Array):
  """Random parameters (the network's initialisation), as a nested dict."""
  tokens = jnp.zeros((1, 1), jnp.int32)
  caches = empty_caches(config, 1, 1)
  end_index = jnp.zeros((1,), jnp.int32)
  return DecoderOnlyNetwork(config).init(key, tokens, tokens, caches, end_index)["params"]


def parameter_shapes(config: DecoderOnlyConfig) -> dict[str, tuple[int, ...]]:
  """{"blocks_0/query/kernel": shape, ...} without allocating anything."""
  abstract = jax.eval_shape(lambda: init_params(config, jax.random.key(0)))
  leaves = jax.tree_util.tree_flatten_with_path(abstract)[0]
  return {"/".join(k.key for k in path): tuple(leaf.shape) for path, leaf in leaves}
