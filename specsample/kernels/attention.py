"""Cached attention that reads only the cache entries each query sees.

`cached_attention(queries, keys, values, allowed, scale)` is softmax((q . k) * scale) . v
over the cache entries `allowed` marks, for grouped-query attention (query head h reads
cache head h // (heads / kv_heads)). On CPU (float32 queries over a float32 or bfloat16
cache, the small-k kernel available, head_dim a multiple of the vector width) it is a custom
call (attention.cc) that, for each query, reads entries 0 .. its last allowed one (not the
cache's whole capacity) and computes the query alone: the same numbers whether it is the only
query of a decoding step or one of a verify call's gamma + 1 (attention_simd.h says the order
of every sum). Elsewhere XLA's einsums and softmax over the whole capacity, with masked
entries biased by -1e10.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from specsample.kernels import native

_TARGET = "specsample_cached_attention"
MASK_BIAS = -1e10  # additive bias of masked positions in the XLA version (T5X's value)


def ends_of(allowed: jax.Array) -> jax.Array:
  """One past each query's last allowed entry.  bool[B, K, C] -> int32[B, K] (0: none).
  Compute it once per forward pass: every layer's attention shares it."""
  capacity = allowed.shape[-1]
  index = jnp.arange(1, capacity + 1, dtype=jnp.int32)
  return jnp.max(jnp.where(allowed, index, 0), axis=-1)


# A cache of this dtype holds bfloat16 numbers' bit patterns (models.kv_cache keeps a compact
# cache so, for in-place updates); the kernel reads it as bfloat16, XLA through `numbers`.
BFLOAT16_BITS = jnp.uint16


def numbers(cache: jax.Array) -> jax.Array:
  """A cache array as numbers: bfloat16 bit patterns (BFLOAT16_BITS) as bfloat16."""
  if cache.dtype == BFLOAT16_BITS:
    return jax.lax.bitcast_convert_type(cache, jnp.bfloat16)
  return cache


def uses_kernel(queries: jax.Array, keys: jax.Array, values: jax.Array | None = None) -> bool:
  """Whether cached_attention takes the CPU kernel for these operands (at trace time):
  float32 queries over float32 or bfloat16 caches (or bfloat16's bits; values as keys,
  None: the same)."""
  values = keys if values is None else values
  isa = native.instruction_set()
  lanes = 16 if isa == "avx512f" else 8
  return (
    native.enabled()
    and queries.dtype == jnp.float32
    and keys.dtype in (jnp.float32, jnp.bfloat16, BFLOAT16_BITS)
    and values.dtype == keys.dtype
    and queries.shape[-1] % lanes == 0
  )


def xla_attention(queries, keys, values, allowed, scale):
  """The same attention in XLA's operations (accelerators, gradients, and where the kernel
  does not apply): queries [batch, k, heads, head_dim] over keys and values [batch,
  capacity, kv_heads, head_dim] (numbers, or bfloat16's bits) where allowed bool[batch, k,
  capacity] -> [batch, k, heads, head_dim]."""
  batch, k, heads, head_dim = queries.shape
  kv_heads = keys.shape[2]
  keys, values = numbers(keys), numbers(values)
  q = queries.reshape(batch, k, kv_heads, heads // kv_heads, head_dim)
  scores = jnp.einsum("bqhgd,bshd->bhgqs", q, keys, preferred_element_type=jnp.float32)
  bias = jnp.where(allowed, 0.0, MASK_BIAS).astype(jnp.float32)  # [batch, k, capacity]
  weights = jax.nn.softmax(scores * scale + bias[:, None, None], axis=-1)
  # float32 queries over a bfloat16 cache: float32 weights and sums (the cache widened)
  dtype = jnp.promote_types(queries.dtype, values.dtype)
  context = jnp.einsum("bhgqs,bshd->bqhgd", weights.astype(dtype), values.astype(dtype))
  return context.reshape(batch, k, heads, head_dim).astype(queries.dtype)


def cached_attention(
  queries: jax.Array,
  keys: jax.Array,
  values: jax.Array,
  allowed: jax.Array,
  scale: float,
  ends: jax.Array | None = None,
) -> jax.Array:
  """Attention of queries [B, K, H, D] over caches keys, values [B, C, KV, D], each query
  seeing the entries allowed bool[B, K, C] marks -> [B, K, H, D] in the queries' dtype.

  ends: `ends_of(allowed)`, if already computed (the kernel reads entries before it).
  """
  batch, k, heads, head_dim = queries.shape
  if keys.shape != values.shape or keys.shape[0] != batch or keys.shape[3] != head_dim:
    raise ValueError(
      f"attention: queries {queries.shape}, keys {keys.shape}, values {values.shape}"
    )
  if heads % keys.shape[2] or allowed.shape != (batch, k, keys.shape[1]):
    raise ValueError(
      f"attention: {heads} heads over {keys.shape[2]} cache heads, allowed {allowed.shape}"
    )
  if not uses_kernel(queries, keys, values):
    return xla_attention(queries, keys, values, allowed, scale)
  if ends is None:
    ends = ends_of(allowed)
  return kernel_attention(queries, keys, values, allowed, ends.astype(jnp.int32), scale)


@functools.partial(jax.custom_jvp, nondiff_argnums=(5,))
def kernel_attention(queries, keys, values, allowed, ends, scale):
  """The custom call on CPU, XLA elsewhere."""
  call = jax.ffi.ffi_call(
    _TARGET, jax.ShapeDtypeStruct(queries.shape, jnp.float32), vmap_method="sequential"
  )

  def kernel(q, k_, v, a, e):
    return call(q, k_, v, a, e, scale=np.float32(scale))

  def xla(q, k_, v, a, e):
    return xla_attention(q, k_, v, a, scale)

  return jax.lax.platform_dependent(queries, keys, values, allowed, ends, cpu=kernel, default=xla)


@kernel_attention.defjvp
def _kernel_attention_jvp(scale, primals, tangents):
  # Gradients (training) go through XLA's attention: the same function up to rounding.
  queries, keys, values, allowed, ends = primals
  out = kernel_attention(queries, keys, values, allowed, ends, scale)
  _, tangent = jax.jvp(
    lambda q, k, v: xla_attention(q, k, v, allowed, scale),
    (queries, keys, values),
    tuple(tangents[:3]),
  )
  return out, tangent
