"""x @ w for a few rows of x: the matrix products of decoding and verification.

Decoding one token multiplies one row per sequence by every weight matrix, and the
speculative verify pass multiplies gamma + 1 rows per sequence. On a CPU such a product
should cost what streaming the weights from memory costs (the arithmetic of a few rows
fits inside that time), but XLA:CPU's dot kernels reach a sixth to a third of their peak
rate at 8 rows, so verifying 9 tokens cost 1.8x one token for a 223M-parameter T5
(docs/benchmarks.md). `matmul` and `matmul_transposed` send such products on CPU to
kernels of our own (`small_k_matmul.cc`, XLA FFI custom calls built at install time by
setup.py), and everything else, and every other platform, to XLA's product.

A kernel is used when all of these hold: the platform is CPU, x and the weights are
float32, x has 1..MAX_ROWS rows (all leading axes together; MAX_ROWS_TRANSPOSED for
`matmul_transposed`), the extension was built and
the CPU has AVX-512 (`kernel_available()`; `why_not_available()` says what is missing),
and the environment variable SPECSAMPLE_MATMUL is not "xla". The choice is made when a
function is traced (jit keeps one trace per function: set the variable before the first
call). Results match XLA's product to float32 rounding (the sums are taken in another
order), so greedy outputs can differ where two logits tie to within rounding.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import math
import os

import jax
import jax.numpy as jnp

# Row limits, from side-by-side timings against XLA's product on this 2-core Zen 4 machine
# (docs/benchmarks.md, scripts/measure_small_k_kernel.py): the [d, n] kernel is faster up
# to 64 rows (kMaxRows, the most the C++ code takes); the [n, d] kernel (tied output
# layers) up to 32 rows, slower beyond (it takes 16-row groups).
MAX_ROWS = 64
MAX_ROWS_TRANSPOSED = 32
_TARGET = "specsample_small_k_matmul"
_TARGET_TRANSPOSED = "specsample_small_k_matmul_transposed"
_EXTENSION = "specsample.kernels._small_k_matmul"
ENV_VARIABLE = "SPECSAMPLE_MATMUL"  # "xla": never use the kernel


@functools.cache
def _load() -> str | None:
  """Registers the FFI target once; None when usable, else why the kernel is not used."""
  spec = importlib.util.find_spec(_EXTENSION)
  if spec is None or spec.origin is None:
    return "the extension was not built (no C++ compiler at install time?)"
  try:
    library = ctypes.CDLL(spec.origin)
  except OSError as error:  # e.g. built for another machine
    return f"the extension {spec.origin} does not load: {error}"
  if not library.SpecsampleSmallKMatmulSupported():
    return "this CPU lacks AVX-512"
  jax.ffi.register_ffi_target(
    _TARGET, jax.ffi.pycapsule(library.SpecsampleSmallKMatmul), platform="cpu"
  )
  jax.ffi.register_ffi_target(
    _TARGET_TRANSPOSED, jax.ffi.pycapsule(library.SpecsampleSmallKMatmulTransposed), platform="cpu"
  )
  return None


def kernel_available() -> bool:
  """Whether the CPU kernel is built and this CPU can run it."""
  return _load() is None


def why_not_available() -> str | None:
  """None when the kernel is available, else the reason."""
  return _load()


def uses_kernel(x_shape: tuple[int, ...], x_dtype, w_dtype, *, max_rows: int = MAX_ROWS) -> bool:
  """Whether a product of these operands takes a kernel on CPU (decided at trace time);
  max_rows: MAX_ROWS for `matmul`, MAX_ROWS_TRANSPOSED for `matmul_transposed`."""
  rows = math.prod(x_shape[:-1])
  return (
    os.environ.get(ENV_VARIABLE, "auto") != "xla"
    and jnp.dtype(x_dtype) == jnp.float32
    and jnp.dtype(w_dtype) == jnp.float32
    and 1 <= rows <= max_rows
    and kernel_available()
  )


def _xla_matmul(x: jax.Array, w: jax.Array) -> jax.Array:
  return jnp.einsum("...i,io->...o", x, w)


def _xla_matmul_transposed(x: jax.Array, e: jax.Array) -> jax.Array:
  return jnp.einsum("...i,oi->...o", x, e)


@jax.custom_jvp
def _kernel_matmul(x: jax.Array, w: jax.Array) -> jax.Array:
  """[rows, d] x [d, n] -> [rows, n] through the FFI kernel on CPU, XLA elsewhere."""
  call = jax.ffi.ffi_call(
    _TARGET, jax.ShapeDtypeStruct((x.shape[0], w.shape[1]), jnp.float32), vmap_method="sequential"
  )
  return jax.lax.platform_dependent(x, w, cpu=call, default=_xla_matmul)


@_kernel_matmul.defjvp
def _kernel_matmul_jvp(primals, tangents):
  # The product is bilinear; tangents go through XLA's product (training and gradients
  # never need the kernel's speed).
  (x, w), (dx, dw) = primals, tangents
  return _kernel_matmul(x, w), _xla_matmul(dx, w) + _xla_matmul(x, dw)


@jax.custom_jvp
def _kernel_matmul_transposed(x: jax.Array, e: jax.Array) -> jax.Array:
  """[rows, d] x [n, d] -> [rows, n] through the FFI kernel on CPU, XLA elsewhere."""
  call = jax.ffi.ffi_call(
    _TARGET_TRANSPOSED,
    jax.ShapeDtypeStruct((x.shape[0], e.shape[0]), jnp.float32),
    vmap_method="sequential",
  )
  return jax.lax.platform_dependent(x, e, cpu=call, default=_xla_matmul_transposed)


@_kernel_matmul_transposed.defjvp
def _kernel_matmul_transposed_jvp(primals, tangents):
  (x, e), (dx, de) = primals, tangents
  y = _kernel_matmul_transposed(x, e)
  return y, _xla_matmul_transposed(dx, e) + _xla_matmul_transposed(x, de)


def matmul(x: jax.Array, w: jax.Array) -> jax.Array:
  """x @ w over the last axis of x.  [..., d] x [d, n] -> [..., n], x's dtype."""
  if w.ndim != 2 or x.shape[-1] != w.shape[0]:
    raise ValueError(f"matmul: expected x [..., d] and w [d, n], got {x.shape} and {w.shape}")
  if not uses_kernel(x.shape, x.dtype, w.dtype):
    return _xla_matmul(x, w)
  rows = x.reshape(-1, x.shape[-1])  # [rows, d]
  return _kernel_matmul(rows, w).reshape(*x.shape[:-1], w.shape[1])


def matmul_transposed(x: jax.Array, e: jax.Array) -> jax.Array:
  """x @ e.T over the last axis of x.  [..., d] x [n, d] -> [..., n], x's dtype.

  For weights stored [out, in], such as a tied embedding used as the output layer: calling
  `matmul(x, e.T)` instead would copy e transposed on every call (the kernel reads its
  operands in memory order).
  """
  if e.ndim != 2 or x.shape[-1] != e.shape[1]:
    raise ValueError(
      f"matmul_transposed: expected x [..., d] and e [n, d], got {x.shape} and {e.shape}"
    )
  if not uses_kernel(x.shape, x.dtype, e.dtype, max_rows=MAX_ROWS_TRANSPOSED):
    return _xla_matmul_transposed(x, e)
  rows = x.reshape(-1, x.shape[-1])  # [rows, d]
  return _kernel_matmul_transposed(rows, e).reshape(*x.shape[:-1], e.shape[0])
