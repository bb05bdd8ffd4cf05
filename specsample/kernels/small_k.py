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
MAX_ROWS_TRANSPOSED), the extension was built and the CPU has AVX-512 or AVX2 + FMA
(`kernel_available()`; `why_not_available()` says what is missing, `instruction_set()`
which kernels run), and the environment variable SPECSAMPLE_MATMUL is not "xla". The
choice is made when a function is traced (jit keeps one trace per function: set the variable
before the first call). Results match XLA's product to float32 rounding (the sums are taken
in another order), so greedy outputs can differ where two logits tie to within rounding.
The kernels are row-count invariant: each row of the result is summed in the same order
whatever the number of rows (and the batch) is, within the row limits, so a row
multiplied alone, as in a plain decoding step, equals the same row in a verification call
of gamma + 1 rows, bit for bit.

The float kernels exist for two instruction sets: AVX-512 (16-float vectors, "avx512f")
and AVX2 + FMA (8-float vectors, "avx2"); the 8-bit-activation kernels of
`specsample.kernels.int8_blocks` for three: AVX-512 VNNI, AVX-VNNI and AVX2's vpmaddubsw
(`integer_instruction_set()`). The best the CPU has is used. The environment variable
SPECSAMPLE_SMALL_K_ISA picks another (to test or time each on one machine): "avx512f"
(AVX-512, with AVX-512 VNNI where the CPU has it), "avxvnni" (AVX2 float kernels,
AVX-VNNI integer ones), "avx2" (AVX2 and vpmaddubsw); "auto" or unset picks the best. It
is read once, when the kernel is first looked for.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os

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
_ROW_LIMITS = {"avx512f": (64, 32), "avxvnni": (56, 32), "avx2": (56, 32)}
MAX_ROWS = 64  # the most rows `matmul` takes the kernel with, on any CPU
MAX_ROWS_TRANSPOSED = 32  # the same for `matmul_transposed`
_TARGET = "specsample_small_k_matmul"
_TARGET_TRANSPOSED = "specsample_small_k_matmul_transposed"
_BF16 = "_bf16"  # the targets' suffix for bfloat16 weights
# The FFI handler symbols of the extension for each target.
_SYMBOLS = {
  _TARGET: "SpecsampleSmallKMatmul",
  _TARGET_TRANSPOSED: "SpecsampleSmallKMatmulTransposed",
  _TARGET + _BF16: "SpecsampleSmallKMatmulBf16",
  _TARGET_TRANSPOSED + _BF16: "SpecsampleSmallKMatmulTransposedBf16",
  # The transposed product with weights in GGUF blocks (specsample.kernels.blocks).
  _TARGET + "_q8_0": "SpecsampleSmallKMatmulQ8_0",
  _TARGET + "_q4_0": "SpecsampleSmallKMatmulQ4_0",
  _TARGET + "_q4_1": "SpecsampleSmallKMatmulQ4_1",
  _TARGET + "_q5_0": "SpecsampleSmallKMatmulQ5_0",
  _TARGET + "_q4_k": "SpecsampleSmallKMatmulQ4_K",
  _TARGET + "_q6_k": "SpecsampleSmallKMatmulQ6_K",
  # The same with 8-bit activations and integer dot products (specsample.kernels.int8_blocks).
  "specsample_int8_matmul_q8_0": "SpecsampleInt8MatmulQ8_0",
  "specsample_int8_matmul_q4_0": "SpecsampleInt8MatmulQ4_0",
  "specsample_int8_matmul_q4_1": "SpecsampleInt8MatmulQ4_1",
  "specsample_int8_matmul_q5_0": "SpecsampleInt8MatmulQ5_0",
  "specsample_int8_matmul_q4_k": "SpecsampleInt8MatmulQ4_K",
  "specsample_int8_matmul_q6_k": "SpecsampleInt8MatmulQ6_K",
  # Cached attention over each query's visible entries (specsample.kernels.attention).
  "specsample_cached_attention": "SpecsampleCachedAttention",
  # A decoder layer's two halves with 8-bit activations (specsample.kernels.decoder_layer).
  "specsample_int8_qkv": "SpecsampleInt8Qkv",
  "specsample_int8_attention_mlp": "SpecsampleInt8AttentionMlp",
}
WEIGHT_DTYPES = (jnp.dtype(jnp.float32), jnp.dtype(jnp.bfloat16))  # what the kernels take
ENV_VARIABLE = "SPECSAMPLE_MATMUL"  # "xla": never use the kernel
ISA_VARIABLE = "SPECSAMPLE_SMALL_K_ISA"  # "avx2": the AVX2 kernels even on an AVX-512 CPU
# The instruction sets, best first, as small_k_matmul.h numbers them (enum class Isa).
# "avxvnni" runs the AVX2 float kernels and AVX-VNNI's integer dot products for 8-bit
# activations; "avx512f" takes AVX-512 VNNI for those where the CPU has it (else the best
# AVX2-width set); "avx2" takes vpmaddubsw.
_ISA_CODES = {"avx512f": 2, "avxvnni": 3, "avx2": 1}
# The integer kernels of 8-bit activations (int8_matmul.h, enum class IntIsa).
_INT_ISA_NAMES = {3: "avx512vnni", 2: "avxvnni", 1: "avx2"}
CPU_LACKS_ISA = "this CPU lacks AVX-512 and AVX2 + FMA"


@dataclasses.dataclass(frozen=True)
class _Loaded:
  isa: str | None  # the instruction set the kernels run with; None: not used
  reason: str | None  # why not, when isa is None
  cpu_isas: tuple[str, ...] = ()  # what this CPU can run, best first
  integer_isa: str | None = None  # the 8-bit-activation kernels' ("avx512vnni", ...)


@functools.cache
def _load() -> _Loaded:
  """Registers the FFI targets once and picks the instruction set (SPECSAMPLE_SMALL_K_ISA)."""
  requested = os.environ.get(ISA_VARIABLE) or "auto"
  if requested != "auto" and requested not in _ISA_CODES:
    raise ValueError(f"{ISA_VARIABLE}={requested!r}: expected auto, {', '.join(_ISA_CODES)}")
  try:
    library = native.library()
  except native.NativeUnavailable as error:
    return _Loaded(None, str(error))
  try:
    cpu_bits = library.SpecsampleSmallKMatmulCpuIsas()
    use_isa = library.SpecsampleSmallKMatmulUseIsa
    integer_isa = library.SpecsampleSmallKMatmulIntIsa
    handlers = {target: getattr(library, symbol) for target, symbol in _SYMBOLS.items()}
  except AttributeError:  # built from older sources
    return _Loaded(None, native.out_of_date())
  cpu_isas = tuple(isa for isa, code in _ISA_CODES.items() if cpu_bits >> code & 1)
  code = use_isa(_ISA_CODES.get(requested, 0))  # 0: the best this CPU has
  if code == 0:
    if not cpu_isas:
      return _Loaded(None, CPU_LACKS_ISA)
    return _Loaded(None, f"{ISA_VARIABLE}={requested}, which this CPU lacks", cpu_isas)
  for target, handler in handlers.items():
    jax.ffi.register_ffi_target(target, jax.ffi.pycapsule(handler), platform="cpu")
  isa = next(isa for isa, isa_code in _ISA_CODES.items() if isa_code == code)
  return _Loaded(isa, None, cpu_isas, _INT_ISA_NAMES.get(integer_isa()))


def kernel_available() -> bool:
  """Whether the CPU kernel is built and this CPU can run it."""
  return _load().isa is not None


def why_not_available() -> str | None:
  """None when the kernel is available, else the reason."""
  return _load().reason


def instruction_set() -> str | None:
  """The instruction set the kernels run with: "avx512f", "avx2", or None (not available)."""
  return _load().isa


def integer_instruction_set() -> str | None:
  """The instruction set of the 8-bit-activation kernels (int8_blocks): "avx512vnni",
  "avxvnni" (AVX-VNNI, 256-bit), "avx2" (vpmaddubsw), or None (not available)."""
  return _load().integer_isa


def supported_instruction_sets() -> tuple[str, ...]:
  """The instruction sets this CPU can run the kernels with, best first (() when the
  extension is not built), whatever SPECSAMPLE_SMALL_K_ISA asks for."""
  return _load().cpu_isas


def row_limit(*, transposed: bool = False) -> int:
  """The most rows of x that `matmul` (or, transposed, `matmul_transposed`) takes the kernel
  with on this CPU; 0 when the kernel is not available."""
  isa = instruction_set()
  if isa is None:
    return 0
  return _ROW_LIMITS[isa][1 if transposed else 0]


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
    os.environ.get(ENV_VARIABLE, "auto") != "xla"
    and jnp.dtype(x_dtype) == jnp.float32
    and jnp.dtype(w_dtype) in WEIGHT_DTYPES
    and kernel_available()
    and 1 <= rows <= (row_limit(transposed=transposed) if max_rows is None else max_rows)
  )


def _xla_matmul(x: jax.Array, w: jax.Array) -> jax.Array:
  return jnp.einsum("...i,io->...o", x, w.astype(x.dtype))


def _xla_matmul_transposed(x: jax.Array, e: jax.Array) -> jax.Array:
  return jnp.einsum("...i,oi->...o", x, e.astype(x.dtype))


def _target(name: str, weights: jax.Array) -> str:
  return name + (_BF16 if weights.dtype == jnp.bfloat16 else "")


@jax.custom_jvp
def _kernel_matmul(x: jax.Array, w: jax.Array) -> jax.Array:
  """[rows, d] x [d, n] -> [rows, n] through the FFI kernel on CPU, XLA elsewhere."""
  call = jax.ffi.ffi_call(
    _target(_TARGET, w),
    jax.ShapeDtypeStruct((x.shape[0], w.shape[1]), jnp.float32),
    vmap_method="sequential",
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
    _target(_TARGET_TRANSPOSED, e),
    jax.ShapeDtypeStruct((x.shape[0], e.shape[0]), jnp.float32),
    vmap_method="sequential",
  )
  return jax.lax.platform_dependent(x, e, cpu=call, default=_xla_matmul_transposed)


@_kernel_matmul_transposed.defjvp
def _kernel_matmul_transposed_jvp(primals, tangents):
  (x, e), (dx, de) = primals, tangents
  y = _kernel_matmul_transposed(x, e)
  return y, _xla_matmul_transposed(dx, e) + _xla_matmul_transposed(x, de)


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
  return _kernel_matmul(rows, w).reshape(*x.shape[:-1], w.shape[1])


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
  return _kernel_matmul_transposed(rows, e).reshape(*x.shape[:-1], e.shape[0])
