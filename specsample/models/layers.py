"""Layers every model here shares: weight products, RMSNorm, projections and the attention
mask bias (the cache and its writes: models.kv_cache).

Kernels are stored [in, out] (T5X's layout; Hugging Face [out, in] matrices are
transposed when read; a GGUF matrix kept in blocks, `kernels.blocks.BlockMatrix`, stays
[out, in]). Every product with a weight matrix goes through `dense` / `dense_transposed`,
which ask the matrix to multiply itself (`kernels.matrices.WeightMatrix`): its form takes
specsample.kernels' CPU kernel for the few-row products of decoding and verification
where it applies, and XLA's product elsewhere.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from specsample.core.contract import GreedyTokens, greedy_tokens
from specsample.kernels import int8_blocks, small_k
from specsample.kernels.matrices import is_block_matrix, weight_matrix

MASK_BIAS = -1e10  # additive bias of masked attention positions (T5X's value)


def dense(x: jax.Array, kernel) -> jax.Array:
  """x @ kernel over the last axis.  [..., in] x [in, out] -> [..., out].

  kernel may also be a block matrix (GGUF blocks, stored [out, in]): each form of a weight
  matrix multiplies itself (`kernels.matrices.WeightMatrix`).
  """
  return weight_matrix(kernel).matmul(x)


def dense_transposed(x: jax.Array, kernel_t) -> jax.Array:
  """x @ kernel_t.T, for weights stored [out, in] (a tied embedding as the output layer).
  [..., in] x [out, in] -> [..., out]; `dense(x, kernel_t.T)` would copy the transpose.
  kernel_t may be a block matrix (`dense`)."""
  return weight_matrix(kernel_t, "out_in").matmul(x)


def greedy_transposed(x: jax.Array, kernel_t) -> GreedyTokens:
  """`greedy_tokens(dense_transposed(x, kernel_t))` ([..., in] -> `GreedyTokens` [...]
  each): what greedy drafting reads of an output layer's logits. With 8-bit activations on
  CPU one kernel call gives it (`int8_blocks.greedy_matmul`), the logits never leaving it:
  the same tokens and flags, the top probability within 2e-6 of XLA's."""
  matrix = weight_matrix(kernel_t, "out_in")
  if isinstance(matrix, int8_blocks.Int8BlockMatrix) and int8_blocks.uses_kernel(x.dtype):
    tokens, best, top = int8_blocks.greedy_matmul(x, matrix)
    return GreedyTokens(tokens, ~jnp.isfinite(best), top)
  return greedy_tokens(matrix.matmul(x).astype(jnp.float32))


def lookup(embedder: nn.Embed, tokens: jax.Array, dtype) -> jax.Array:
  """The embedding rows of tokens int32[...] -> [..., features] in dtype. Unlike calling
  the nn.Embed, which converts its whole table to its dtype first (a float32 copy of a
  bfloat16 table per call), only the rows taken are converted (or dequantized, for a
  table in GGUF blocks)."""
  return weight_matrix(embedder.embedding, "out_in").take_rows(tokens).astype(dtype)


def rounded(x: jax.Array) -> jax.Array:
  """x itself, its values rounded here: a product's result that must not be fused into
  the sum that follows it.

  XLA:CPU lets LLVM contract a product and the sum it takes part in into one fused
  multiply-add where both sit in one fused loop. Where a sum has two products for terms
  (Gemma's scaled embedding plus a post-norm's output; first * cos - second * sin),
  which one is contracted can differ between programs over different numbers of tokens,
  so a k-token verify call and k one-token steps differ by an ulp, which 8-bit
  activations amplify into different tokens. A select on x == x (true but for NaN, whose
  other branch -x is NaN too) is decided only at run time, so it ends the product: no
  multiply-add reaches through it, whether or not the positions are known when compiling,
  and two such selects cannot be merged into a select of their sum. A no-op
  reduce_precision or an optimization_barrier does not end it: XLA:CPU emits nothing for
  the first and removes the second before fusing.
  """
  return jnp.where(x == x, x, -x)


def stored_blocks(module: nn.Module, name: str, shape: tuple[int, int]):
  """The parameter `name` of module if it is a block matrix (checked against its [out, in]
  shape), else None. Flax's `param` would compare the blocks' bytes with the float
  shape, so block matrices are read as variables."""
  if not module.has_variable("params", name):
    return None
  stored = module.get_variable("params", name)
  if not is_block_matrix(stored):
    return None
  if stored.shape != shape:
    raise ValueError(f"{module.name}/{name}: blocks of a {stored.shape} matrix, expected {shape}")
  return stored


class Embed(nn.Embed):
  """nn.Embed whose table may be a block matrix (a GGUF embedding kept in blocks)."""

  def setup(self):
    stored = stored_blocks(self, "embedding", (self.num_embeddings, self.features))
    if stored is None:
      super().setup()
    else:
      self.embedding = stored


def mask_bias(allowed: jax.Array) -> jax.Array:
  """bool -> float32 additive attention bias: 0 where allowed, MASK_BIAS elsewhere."""
  return jnp.where(allowed, 0.0, MASK_BIAS).astype(jnp.float32)


class RMSNorm(nn.Module):
  """x / rms(x) * scale, computed in float32, without mean or bias (T5, Llama); with
  `plus_one`, x / rms(x) * (1 + scale), scale initialised to 0 (Gemma)."""

  epsilon: float = 1e-6
  dtype: jnp.dtype = jnp.float32
  plus_one: bool = False

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    init = nn.initializers.zeros if self.plus_one else nn.initializers.ones
    scale = self.param("scale", init, (x.shape[-1],), self.dtype)
    x32 = x.astype(jnp.float32)
    # The mean square through small_k.row_sums: on CPU each row's sum is taken in the same
    # order whatever the number of rows, so a verified position is normalized exactly as a
    # plain decoding step would normalize it.
    mean_square = small_k.row_sums(x32 * x32)[..., None] / x.shape[-1]
    x32 = x32 * jax.lax.rsqrt(mean_square + self.epsilon)
    factor = scale.astype(jnp.float32)
    if self.plus_one:
      factor = 1.0 + factor
    return (x32 * factor).astype(self.dtype)


class Projection(nn.Module):
  """A linear map with an [in, out] kernel named `kernel` (and a `bias` if use_bias).

  Initialised with variance 1/fan_in, times `init_scale` (T5X divides the query kernel by
  sqrt(head_dim) because T5 does not scale attention logits at run time).
  """

  features: int
  dtype: jnp.dtype = jnp.float32
  init_scale: float = 1.0
  use_bias: bool = False

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    init = nn.initializers.variance_scaling(self.init_scale**2, "fan_in", "normal")
    kernel = stored_blocks(self, "kernel", (self.features, x.shape[-1]))
    if kernel is None:
      kernel = self.param("kernel", init, (x.shape[-1], self.features), self.dtype)
    y = dense(x, kernel)
    if self.use_bias:
      bias = self.param("bias", nn.initializers.zeros, (self.features,), self.dtype)
      y = y + bias.astype(y.dtype)
    return y
