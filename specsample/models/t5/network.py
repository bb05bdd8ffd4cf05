"""The T5 encoder-decoder network (Flax linen), with a multi-token decoder cache.

`T5Network` has one method per job:
  encode             encoder tokens -> encoded states (run once per prompt)
  cross_keys_values  encoded states -> every decoder layer's cross-attention keys/values
  decode             k decoder tokens at per-row positions, attending to a self-attention
                     cache written in place at each row's end index -> logits
  __call__           the teacher-forced full forward pass (initialisation, parity tests)
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from specsample.models.kv_cache import KeysValues, causal_mask
from specsample.models.layers import Projection, RMSNorm, dense_transposed, lookup, mask_bias
from specsample.models.t5.config import T5Config
from specsample.models.t5.layers import MLP, Attention, RelativePositionBias


def _relative_position_bias(config: T5Config, *, bidirectional: bool) -> RelativePositionBias:
  """One stack's relative position bias (shared by all its layers)."""
  return RelativePositionBias(
    config.num_heads,
    config.relative_attention_num_buckets,
    config.relative_attention_max_distance,
    bidirectional=bidirectional,
    dtype=jnp.dtype(config.dtype),
  )


class EncoderLayer(nn.Module):
  config: T5Config

  def setup(self):
    c, dtype = self.config, jnp.dtype(self.config.dtype)
    self.pre_attention_layer_norm = RMSNorm(c.layer_norm_epsilon, dtype)
    self.attention = Attention(c.num_heads, c.head_dim, c.d_model, dtype)
    self.pre_mlp_layer_norm = RMSNorm(c.layer_norm_epsilon, dtype)
    self.mlp = MLP(c.mlp_dim, c.d_model, c.mlp_activations, dtype)

  def __call__(self, x: jax.Array, bias: jax.Array) -> jax.Array:
    h = self.pre_attention_layer_norm(x)
    x = x + self.attention(h, h, bias)
    return x + self.mlp(self.pre_mlp_layer_norm(x))


class Encoder(nn.Module):
  config: T5Config

  def setup(self):
    c, dtype = self.config, jnp.dtype(self.config.dtype)
    self.relpos_bias = _relative_position_bias(c, bidirectional=True)
    self.layers = [EncoderLayer(c) for _ in range(c.num_encoder_layers)]
    self.encoder_norm = RMSNorm(c.layer_norm_epsilon, dtype)

  def __call__(self, x: jax.Array, valid: jax.Array) -> jax.Array:
    """x [batch, length, d_model], valid bool[batch, length] -> [batch, length, d_model]."""
    positions = jnp.arange(x.shape[1], dtype=jnp.int32)
    bias = self.relpos_bias(positions[None], positions)  # [1, heads, length, length]
    bias = bias + mask_bias(valid[:, None, :, None] & valid[:, None, None, :])
    for layer in self.layers:
      x = layer(x, bias)
    return self.encoder_norm(x)


class DecoderLayer(nn.Module):
  config: T5Config

  def setup(self):
    c, dtype = self.config, jnp.dtype(self.config.dtype)
    self.pre_self_attention_layer_norm = RMSNorm(c.layer_norm_epsilon, dtype)
    self.self_attention = Attention(c.num_heads, c.head_dim, c.d_model, dtype)
    self.pre_cross_attention_layer_norm = RMSNorm(c.layer_norm_epsilon, dtype)
    self.encoder_decoder_attention = Attention(c.num_heads, c.head_dim, c.d_model, dtype)
    self.pre_mlp_layer_norm = RMSNorm(c.layer_norm_epsilon, dtype)
    self.mlp = MLP(c.mlp_dim, c.d_model, c.mlp_activations, dtype)

  def cross_keys_values(self, encoded: jax.Array) -> KeysValues:
    """[batch, enc_length, d_model] -> keys, values [batch, enc_length, heads, head_dim]."""
    return KeysValues(*self.encoder_decoder_attention.keys_values(encoded))

  def __call__(
    self,
    x: jax.Array,
    self_bias: jax.Array,
    cross: KeysValues,
    cross_bias: jax.Array,
    cache: KeysValues | None,
    end_index: jax.Array | None,
  ) -> tuple[jax.Array, KeysValues]:
    """x [batch, k, d_model] -> (x, this layer's self-attention keys/values).

    With a cache, the k new keys/values are written at each row's end index and the
    queries attend over the whole cache (the bias masks what they must not see);
    without one, they attend over the k positions themselves.
    """
    h = self.pre_self_attention_layer_norm(x)
    keys, values = self.self_attention.keys_values(h)  # [batch, k, heads, head_dim]
    if cache is not None:  # [batch, capacity, heads, head_dim] each
      keys, values = cache.write(keys, values, end_index)
    x = x + self.self_attention.attend(self.self_attention.queries(h), keys, values, self_bias)
    h = self.pre_cross_attention_layer_norm(x)
    queries = self.encoder_decoder_attention.queries(h)
    x = x + self.encoder_decoder_attention.attend(queries, cross[0], cross[1], cross_bias)
    x = x + self.mlp(self.pre_mlp_layer_norm(x))
    return x, KeysValues(keys, values)


class Decoder(nn.Module):
  config: T5Config
  embedder: nn.Embed

  def setup(self):
    c, dtype = self.config, jnp.dtype(self.config.dtype)
    self.relpos_bias = _relative_position_bias(c, bidirectional=False)
    self.layers = [DecoderLayer(c) for _ in range(c.num_decoder_layers)]
    self.decoder_norm = RMSNorm(c.layer_norm_epsilon, dtype)
    if not c.tie_word_embeddings:
      self.logits_dense = Projection(c.vocab_size, dtype=dtype)

  def cross_keys_values(self, encoded: jax.Array) -> tuple[KeysValues, ...]:
    return tuple(layer.cross_keys_values(encoded) for layer in self.layers)

  def __call__(
    self,
    tokens: jax.Array,
    query_positions: jax.Array,
    cross: tuple[KeysValues, ...],
    encoder_valid: jax.Array,
    caches: tuple[KeysValues, ...] | None = None,
    end_index: jax.Array | None = None,
    key_positions: jax.Array | None = None,
    allowed: jax.Array | None = None,
  ) -> tuple[jax.Array, tuple[KeysValues, ...]]:
    """tokens, query_positions int32[batch, k] -> (logits float32[batch, k, vocab], caches).

    A token tree passes the cache entries' positions int32[batch, length] and what each
    token sees, allowed bool[batch, k, length]; by default entry i is at position i and
    tokens see the entries at or before their own position.
    """
    x = lookup(self.embedder, tokens, jnp.dtype(self.config.dtype))  # [batch, k, d_model]
    key_length = tokens.shape[1] if caches is None else caches[0].capacity
    if key_positions is None:
      key_positions = jnp.arange(key_length, dtype=jnp.int32)
      allowed = causal_mask(query_positions, key_length)  # [batch, k, length]
    self_bias = self.relpos_bias(query_positions, key_positions) + mask_bias(allowed[:, None])
    cross_bias = mask_bias(encoder_valid[:, None, None, :])  # [batch, 1, 1, enc_length]
    new_caches = []
    for i, layer in enumerate(self.layers):
      cache = None if caches is None else caches[i]
      x, keys_values = layer(x, self_bias, cross[i], cross_bias, cache, end_index)
      new_caches.append(keys_values)
    y = self.decoder_norm(x).astype(jnp.float32)
    if self.config.rescale_logits:  # v1.0: y * d_model ** -0.5 before the shared embedding
      y = y / jnp.sqrt(jnp.float32(self.config.d_model))
    if self.config.tie_word_embeddings:
      logits = dense_transposed(y, self.embedder.embedding)
    else:
      logits = self.logits_dense(y)
    return logits.astype(jnp.float32), tuple(new_caches)


class T5Network(nn.Module):
  config: T5Config

  def setup(self):
    c = self.config
    dtype = jnp.dtype(c.dtype)
    self.token_embedder = nn.Embed(
      c.vocab_size,
      c.d_model,
      dtype=dtype,
      param_dtype=dtype,
      embedding_init=nn.initializers.normal(1.0),
    )
    self.encoder = Encoder(c)
    self.decoder = Decoder(c, self.token_embedder)

  def encode(self, tokens: jax.Array, valid: jax.Array) -> jax.Array:
    """tokens int32[batch, length], valid bool[batch, length] -> [batch, length, d_model]."""
    embedded = lookup(self.token_embedder, tokens, jnp.dtype(self.config.dtype))
    return self.encoder(embedded, valid)

  def cross_keys_values(self, encoded: jax.Array) -> tuple[KeysValues, ...]:
    return self.decoder.cross_keys_values(encoded)

  def decode(
    self,
    tokens,
    query_positions,
    cross,
    encoder_valid,
    caches=None,
    end_index=None,
    key_positions=None,
    allowed=None,
  ):
    return self.decoder(
      tokens, query_positions, cross, encoder_valid, caches, end_index, key_positions, allowed
    )

  def __call__(self, encoder_tokens: jax.Array, decoder_tokens: jax.Array) -> jax.Array:
    """Teacher-forced forward pass.  -> logits float32[batch, decoder_length, vocab].

    Padding follows T5X: encoder positions with token 0 are masked; decoder positions
    attend causally (compare outputs at valid positions only).
    """
    valid = encoder_tokens > 0
    encoded = self.encode(encoder_tokens, valid)
    positions = jnp.broadcast_to(
      jnp.arange(decoder_tokens.shape[1], dtype=jnp.int32), decoder_tokens.shape
    )
    logits, _ = self.decode(decoder_tokens, positions, self.cross_keys_values(encoded), valid)
    return logits


def parameter_shapes(config: T5Config) -> dict[str, tuple[int, ...]]:
  """{"decoder/layers_0/mlp/wo/kernel": shape, ...} without allocating anything."""
  tokens = jax.ShapeDtypeStruct((1, 2), jnp.int32)
  abstract = jax.eval_shape(
    lambda t: T5Network(config).init(jax.random.key(0), t, t)["params"], tokens
  )
  leaves = jax.tree_util.tree_flatten_with_path(abstract)[0]
  return {"/".join(k.key for k in path): tuple(leaf.shape) for path, leaf in leaves}
