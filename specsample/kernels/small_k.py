"""x @ w for a few rows of x: the matrix products of decoding and verification.

Decoding one token multiplies one row per sequence by every weight matrix, and the
speculative verify pass multiplies gamma + 1 rows per sequence. On a CPU such a product
should cost what streaming the weights from memory costs (the arithmetic of a few rows
fits inside that time), but XLA:CPU's dot kernels reach a sixth to a third of their peak
rate at 8 rows, so verifying 9 tokens cost 1.8x one token for a 223M-parameter T5
(docs/benchmarks.md). `matmul` and `matmul_transposed` send such products on CPU to
kernels of our own (`small_k_matmul.cc`, XLA FFI custom calls built at install time by
setup.py), and everything else, and every other platform, to XLA's product.

A kernel is used when all of these hold: the platform is CPU, x is float32 and the weights
float32 or bfloat16 (bfloat16 weights stay bfloat16 in memory, half the bytes to stream,
and are widened to float32 in registers: the product equals the float32 product of the
widened weights bit for bit), x has 1..`row_limit()` rows (all leading axes together;
`row_limit(transposed=True)` for `matmul_transposed`; at most MAX_ROWS and
MAX_ROWS_TRANSPOSED), the kernels are built, this CPU runs them and they are not switched
off (`native.enabled()`: AVX-512 or AVX2 + FMA, SPECSAMPLE_MATMUL not "xla"). The choice is
made when a function is traced. Results match XLA's product to float32 rounding (the sums
are taken in another order), so greedy outputs can differ where two logits tie to within
rounding. The kernels are row-count invariant: each row of the result is summed in the
same order whatever the number of rows (and the batch) is, within the row limits, so a row
multiplied alone, as in a plain decoding step, equals the same row in a verification call
of gamma + 1 rows, bit for bit.

The float kernels exist for two instruction sets: AVX-512 (16-float vectors, "avx512f")
and AVX2 + FMA (8-float vectors, "avx2"); `specsample.kernels.native` picks the best the
CPU has (or the one SPECSAMPLE_SMALL_K_ISA names) and registers the targets.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from specsample.kernels import native

# Row limits per instruction set, (matmul, matmul_transposed), from side-by-side timings
# against XLA's product (scripts/dev/measure_small_k_kernel.py --all-rows). AVX-512, on a
# 2-core Zen 4 (docs/benchmarks.md): the [d, n] kernel is faster up to 64 rows (kMaxRows,
# the most the C++ code takes); the [n, d] kernel (tied output layers) up to 32 rows, level
# or slower beyond (it takes 16-row groups). AVX2, on a 2-core Zen 3 with SmolLM2's [576,
# 1536], [1536, 576] and [576, 49152]: the [d, n] kernel is 1.2-1.35x faster at 56 rows
# and 0.7-1.1x at 64; the [n, d] kernel 1.04-1.09x at 32 rows, 0.87-1.07x at 48-56.
ROW_LIMITS = {"avx512f": (64, 32), "avxvnni": (56, 32), "avx2": (56, 32)}
MAX_ROWS = 64  # the most rows `matmul` takes the kernel with, on any CPU
MAX_ROWS_TRANSPOSED = 32  # the same for `matmul_transposed`
_TARGET = "specsample_small_k_matmul"
_TARGET_TRANSPOSED = "specsample_small_k_matmul_transposed"
_BF16 = "_bf16"  # the targets' suffix for bfloat16 weights
WEIGHT_DTYPES = (jnp.dtype(jnp.float32), jnp.dtype(jnp.bfloat16))  # what the kernels take


def row_limit(*, transposed: bool = False) -> int:
  """The most rows of x that `matmul` (or, transposed, `matmul_transposed`) takes the kernel
  with on this CPU; 0 when the kernel is not available."""
  isa = native.instruction_set()
  if isa is None:
    return 0
  return ROW_LIMITS[isa][1 if transposed else 0]


def uses_kernel(
  x_shape: tuple[int, ...],
  x_dtype,
  w_dtype,
  *,
  transposed: bool = False,
  max_rows: int | None = None,
) -> bool:
  """Whether a product of these operands takes a kernel on CPU (decided at trace time):
  `matmul`'s, or with transposed=True `matmul_transposed`'s; max_rows (if given) in place
  of this CPU's `row_limit`."""
  rows = math.prod(x_shape[:-1])
  return (
    native.enabled()
    and jnp.dtype(x_dtype) == jnp.float32
    and jnp.dtype(w_dtype) in WEIGHT_DTYPES
    and 1 <= rows <= (row_limit(transposed=transposed) if max_rows is None else max_rows)
  )


def _xla_matmul(x: jax.Array, w: jax.Array) -> jax.Array:
  return jnp.einsum("...i,io->...o", x, w.astype(x.dtype))


def _xla_matmul_transposed(x: jax.Array, e: jax.Array) -> jax.Array:
  return jnp.einsum("...i,oi->...o", x, e.astype(x.dtype))


def _target(name: str, weights: jax.Array) -> str:
  return name + (_BF16 if weights.dtype == jnp.bfloat16 else "")


def _bilinear_kernel(target: str, out_axis: int, xla):
  """A product [rows, d] x weights -> [rows, n] (n: the weights' axis `out_axis`) through
  the FFI kernel `target` on CPU, `xla` elsewhere. The product is bilinear; tangents go
  through `xla` (training and gradients never need the kernel's speed)."""

  @jax.custom_jvp
  def product(x: jax.Array, w: jax.Array) -> jax.Array:
    call = jax.ffi.ffi_call(
      _target(target, w),
      jax.ShapeDtypeStruct((x.shape[0], w.shape[out_axis]), jnp.float32),
      vmap_method="sequential",
    )
    return jax.lax.platform_dependent(x, w, cpu=call, default=xla)

  @product.defjvp
  def product_jvp(primals, tangents):
    (x, w), (dx, dw) = primals, tangents
    return product(x, w), xla(dx, w) + xla(x, dw)

  return product


kernel_matmul = _bilinear_kernel(_TARGET, 1, _xla_matmul)  # [rows, d] x [d, n]
kernel_matmul_transposed = _bilinear_kernel(_TARGET_TRANSPOSED, 0, _xla_matmul_transposed)


@jax.custom_jvp
def _kernel_row_sums(x: jax.Array) -> jax.Array:
  """[rows, d] -> [rows, 1]: x @ ones[d, 1] through the FFI kernel on CPU, jnp.sum elsewhere."""
  call = jax.ffi.ffi_call(
    _TARGET, jax.ShapeDtypeStruct((x.shape[0], 1), jnp.float32), vmap_method="sequential"
  )
  ones = jnp.ones((x.shape[1], 1), jnp.float32)
  return jax.lax.platform_dependent(
    x, ones, cpu=call, default=lambda x, _: jnp.sum(x, axis=-1, keepdims=True)
  )


@_kernel_row_sums.defjvp
def _kernel_row_sums_jvp(primals, tangents):
  return _kernel_row_sums(*primals), jnp.sum(tangents[0], axis=-1, keepdims=True)


def row_sums(x: jax.Array) -> jax.Array:
  """x summed over its last axis.  [..., d] -> [...], x's dtype.

  Where the kernel takes x (float32, CPU, up to `row_limit()` rows) each row is summed in
  order, whatever the number of rows, as the products are; XLA:CPU's reductions are not
  row-count invariant (a [9, 576] sum and nine [1, 576] sums differ in the last bits).
  Everywhere else, jnp.sum.
  """
  if not uses_kernel(x.shape, x.dtype, jnp.float32):
    return jnp.sum(x, axis=-1)
  rows = x.reshape(-1, x.shape[-1])  # [rows, d]
  return _kernel_row_sums(rows).reshape(x.shape[:-1])


def matmul(x: jax.Array, w: jax.Array) -> jax.Array:
  """x @ w over the last axis of x.  [..., d] x [d, n] -> [..., n], x's dtype.

  w of another dtype is taken as x's dtype (float32 x with bfloat16 w: the kernel widens w
  in registers; XLA's product, elsewhere, converts it).
  """
  if w.ndim != 2 or x.shape[-1] != w.shape[0]:
    raise ValueError(f"matmul: expected x [..., d] and w [d, n], got {x.shape} and {w.shape}")
  if not uses_kernel(x.shape, x.dtype, w.dtype):
    return _xla_matmul(x, w)
  rows = x.reshape(-1, x.shape[-1])  # [rows, d]
  return kernel_matmul(rows, w).reshape(*x.shape[:-1], w.shape[1])


def matmul_transposed(x: jax.Array, e: jax.Array) -> jax.Array:
  """x @ e.T over the last axis of x.  [..., d] x [n, d] -> [..., n], x's dtype (e converted
  as in `matmul`).

  For weights stored [out, in], such as a tied embedding used as the output layer: calling
  `matmul(x, e.T)` instead would copy e transposed on every call (the kernel reads its
  operands in memory order).
  """
  if e.ndim != 2 or x.shape[-1] != e.shape[1]:
    raise ValueError(
      f"matmul_transposed: expected x [..., d] and e [n, d], got {x.shape} and {e.shape}"
    )
  if not uses_kernel(x.shape, x.dtype, e.dtype, transposed=True):
    return _xla_matmul_transposed(x, e)
  rows = x.reshape(-1, x.shape[-1])  # [rows, d]
  return kernel_matmul_transposed(rows, e).reshape(*x.shape[:-1], e.shape[0])
