"""A decoder layer with 8-bit activations in two custom calls (decoder_layer.cc).

A decoding step of a 30-layer model made of XLA's small operations runs several hundred of
them (norms, rotary embeddings, reshapes, residual adds, the products' custom calls), each
costing microseconds of dispatch on a CPU. With every projection packed for 8-bit
activations (`int8_blocks.Int8BlockMatrix`), a layer is two calls:

  int8_qkv            rmsnorm -> query, key and value products (the activations quantized
                      once) -> rotary embedding of queries and keys
  int8_attention_mlp  cached attention -> output product -> residual -> rmsnorm -> gate
                      and up products -> silu(gate) * up -> down product -> residual

with the cache write between them in XLA (in place). Every step is computed per row, so a
row's numbers do not depend on the call's other rows (verification equals plain decoding,
bit for bit); its float steps are the kernel's own (decoder_layer.cc says which), not XLA's,
so this is its own arithmetic, as 8-bit activations already are. `applies(config, params)`
says when a layer takes this path: a Llama-shaped layer (no biases, no q/k norms, SiLU MLP)
whose seven projections are all Int8BlockMatrix with the same activation passes, on a CPU
with the kernels. Elsewhere (other platforms' lowerings) the same steps run as XLA
operations.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from specsample.kernels import attention, int8_blocks, native

FORMAT_CODES = {"q8_0": 0, "q4_0": 1, "q4_1": 2, "q5_0": 3, "q4_k": 4, "q6_k": 5}
PROJECTIONS = ("query", "key", "value", "out", "gate", "up", "down")


def applies(config, params) -> bool:
  """Whether a decoder layer of `config` with `params` (its variables' "params": the
  projections' kernels, the norms' scales) takes the fused 8-bit path (at trace time)."""
  if (
    not native.enabled()
    or config.dtype != "float32"
    or config.qkv_bias
    or config.out_bias
    or config.mlp_bias
    or config.qk_norm
  ):
    return False
  lanes = 16 if native.instruction_set() == "avx512f" else 8
  widths = (config.d_model, config.num_heads * config.head_dim, config.mlp_dim)
  if any(width % 32 for width in widths) or config.head_dim % lanes:
    return False
  kernels = [params.get(name, {}).get("kernel") for name in PROJECTIONS]
  return all(isinstance(w, int8_blocks.Int8BlockMatrix) for w in kernels) and (
    len({w.passes for w in kernels}) == 1
  )


def _rms_norm(x, scale, eps):
  mean_square = jnp.mean(x * x, axis=-1, keepdims=True)
  return (x * jax.lax.rsqrt(mean_square + eps)) * scale


def _rotate(x, cos, sin):
  """x [..., heads * D] with cos, sin [..., D / 2] (rotate-half, each head)."""
  half = cos.shape[-1]
  heads = x.reshape(*x.shape[:-1], -1, 2 * half)
  first, second = heads[..., :half], heads[..., half:]
  c, s = cos[..., None, :], sin[..., None, :]
  rotated = jnp.concatenate([first * c - second * s, second * c + first * s], axis=-1)
  return rotated.reshape(x.shape)


def _call(target, outputs, *operands, **attributes):
  return jax.ffi.ffi_call(target, outputs, vmap_method="sequential")(*operands, **attributes)


def int8_qkv(x, norm_scale, wq, wk, wv, cos, sin, eps: float):
  """x [B, K, d] -> queries [B, K, Hq * D], keys and values [B, K, Hkv * D]: rmsnorm, the
  three products, the rotary embedding (cos, sin [B, K, D / 2]) of queries and keys."""
  batch, k, d = x.shape
  rows = batch * k
  shapes = [jax.ShapeDtypeStruct((rows, w.rows), jnp.float32) for w in (wq, wk, wv)]

  def kernel(x, scale, q_, k_, v_, c, s):
    return _call(
      "specsample_int8_qkv", shapes, x, scale, q_, k_, v_, c, s,
      eps=np.float32(eps), format_q=np.int32(FORMAT_CODES[wq.format]),
      format_k=np.int32(FORMAT_CODES[wk.format]), format_v=np.int32(FORMAT_CODES[wv.format]),
      passes=np.int32(wq.passes),
    )  # fmt: skip

  def xla(x, scale, q_, k_, v_, c, s):
    h = _rms_norm(x, scale, eps)
    q = int8_blocks.xla_matmul(h, dataclasses.replace(wq, packed=q_))
    k = int8_blocks.xla_matmul(h, dataclasses.replace(wk, packed=k_))
    v = int8_blocks.xla_matmul(h, dataclasses.replace(wv, packed=v_))
    return [_rotate(q, c, s), _rotate(k, c, s), v]

  operands = (
    x.reshape(rows, d), norm_scale.astype(jnp.float32), wq.packed, wk.packed, wv.packed,
    cos.reshape(rows, -1), sin.reshape(rows, -1),
  )  # fmt: skip
  q, k_, v = jax.lax.platform_dependent(*operands, cpu=kernel, default=xla)
  return q.reshape(batch, k, -1), k_.reshape(batch, k, -1), v.reshape(batch, k, -1)


def int8_attention_mlp(
  x, queries, keys, values, allowed, ends, wo, norm_scale, wg, wu, wd, scale: float, eps: float
):
  """x [B, K, d] + attention of queries [B, K, Hq * D] over the caches [B, C, Hkv, D] (each
  query seeing `allowed` [B, K, C] before `ends` [B, K]), through the output projection;
  then + the SwiGLU MLP of its rmsnorm.  -> [B, K, d]."""
  batch, k, d = x.shape
  head_dim = keys.shape[-1]

  def kernel(x, q, k_, v, a, e, o, n, g, u, dn):
    return _call(
      "specsample_int8_attention_mlp", jax.ShapeDtypeStruct(x.shape, jnp.float32),
      x, q, k_, v, a, e, o, n, g, u, dn,
      scale=np.float32(scale), eps=np.float32(eps),
      format_o=np.int32(FORMAT_CODES[wo.format]), format_g=np.int32(FORMAT_CODES[wg.format]),
      format_u=np.int32(FORMAT_CODES[wu.format]), format_d=np.int32(FORMAT_CODES[wd.format]),
      mlp_dim=np.int64(wg.rows), passes=np.int32(wo.passes),
    )  # fmt: skip

  def xla(x, q, k_, v, a, e, o, n, g, u, dn):
    def product(h, packed, like):
      return int8_blocks.xla_matmul(h, dataclasses.replace(like, packed=packed))

    heads = q.reshape(batch, k, -1, head_dim)
    context = attention.xla_attention(heads, k_, v, a, scale).reshape(batch, k, -1)
    y = x + product(context, o, wo)
    h = _rms_norm(y, n, eps)
    return y + product(jax.nn.silu(product(h, g, wg)) * product(h, u, wu), dn, wd)

  return jax.lax.platform_dependent(
    x, queries, keys, values, allowed, ends.astype(jnp.int32), wo.packed,
    norm_scale.astype(jnp.float32), wg.packed, wu.packed, wd.packed, cpu=kernel, default=xla,
  )  # fmt: skip
