"""The native library: the C++ kernels setup.py builds, loaded once for every kernel module.

`library()` gives the extension as a `ctypes.CDLL`, or raises `NativeUnavailable` saying why
not: not built (no C++ compiler at install time), or built for another machine. The first
question about the kernels (`kernel_available`, `instruction_set`, `enabled`, ...) picks
the instruction set and registers every XLA FFI target of the extension (`FFI_TARGETS`); the
op modules (`small_k`: float products and row sums, `blocks`: GGUF blocks, `int8_blocks`:
8-bit activations, `attention`: cached attention, `decoder_layer`: the fused layer) call
their targets by name and decide, each for its own operands, whether to.

Two environment variables steer them. SPECSAMPLE_MATMUL=xla sends every op to XLA
(`enabled()` is False); it is read when a function is traced (jit keeps one trace per
function: set it before the first call). SPECSAMPLE_SMALL_K_ISA picks an instruction set
other than the best the CPU has, to test or time each on one machine: "avx512f" (AVX-512,
with AVX-512 VNNI where the CPU has it), "avxvnni" (AVX2 float kernels, AVX-VNNI integer
ones), "avx2" (AVX2 and vpmaddubsw); "auto" or unset picks the best. It is read once, when
the kernels are first looked for.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import importlib.util
import os

import jax

EXTENSION = "specsample.kernels._small_k_matmul"


class NativeUnavailable(Exception):
  """The extension cannot be used here; the message says why."""


@functools.cache
def _load() -> ctypes.CDLL | str:
  spec = importlib.util.find_spec(EXTENSION)
  if spec is None or spec.origin is None:
    return "the extension was not built (no C++ compiler at install time?)"
  try:
    return ctypes.CDLL(spec.origin)
  except OSError as error:  # e.g. built for another machine
    return f"the extension {spec.origin} does not load: {error}"


def library() -> ctypes.CDLL:
  """The loaded extension; raises NativeUnavailable (with the reason) where it is not."""
  loaded = _load()
  if isinstance(loaded, str):
    raise NativeUnavailable(loaded)
  return loaded


def build_id() -> str:
  """The built extension, named by its file's size and modification time (every build,
  as a new version's install makes, gives another), or "none" where it was not built."""
  spec = importlib.util.find_spec(EXTENSION)
  if spec is None or spec.origin is None:
    return "none"
  stat = os.stat(spec.origin)
  return f"{stat.st_size}-{stat.st_mtime_ns}"


def out_of_date() -> str:
  """The reason to give when the library lacks a symbol its Python side expects."""
  origin = importlib.util.find_spec(EXTENSION).origin
  return f"the extension {origin} is out of date (pip install -e . again)"


# The XLA FFI targets the extension defines -> their handler symbols; each op module calls
# its own by name.
FFI_TARGETS = {
  # Products with float32 or bfloat16 weights (specsample.kernels.small_k).
  "specsample_small_k_matmul": "SpecsampleSmallKMatmul",
  "specsample_small_k_matmul_transposed": "SpecsampleSmallKMatmulTransposed",
  "specsample_small_k_matmul_bf16": "SpecsampleSmallKMatmulBf16",
  "specsample_small_k_matmul_transposed_bf16": "SpecsampleSmallKMatmulTransposedBf16",
  # The transposed product with weights in GGUF blocks (specsample.kernels.blocks).
  "specsample_small_k_matmul_q8_0": "SpecsampleSmallKMatmulQ8_0",
  "specsample_small_k_matmul_q4_0": "SpecsampleSmallKMatmulQ4_0",
  "specsample_small_k_matmul_q4_1": "SpecsampleSmallKMatmulQ4_1",
  "specsample_small_k_matmul_q5_0": "SpecsampleSmallKMatmulQ5_0",
  "specsample_small_k_matmul_q4_k": "SpecsampleSmallKMatmulQ4_K",
  "specsample_small_k_matmul_q6_k": "SpecsampleSmallKMatmulQ6_K",
  # The same with 8-bit activations and integer dot products (specsample.kernels.int8_blocks).
  "specsample_int8_matmul_q8_0": "SpecsampleInt8MatmulQ8_0",
  "specsample_int8_matmul_q4_0": "SpecsampleInt8MatmulQ4_0",
  "specsample_int8_matmul_q4_1": "SpecsampleInt8MatmulQ4_1",
  "specsample_int8_matmul_q5_0": "SpecsampleInt8MatmulQ5_0",
  "specsample_int8_matmul_q4_k": "SpecsampleInt8MatmulQ4_K",
  "specsample_int8_matmul_q6_k": "SpecsampleInt8MatmulQ6_K",
  # What greedy drafting reads of such a product: argmax, maximum, top probability.
  "specsample_int8_greedy_q8_0": "SpecsampleInt8GreedyQ8_0",
  "specsample_int8_greedy_q4_0": "SpecsampleInt8GreedyQ4_0",
  "specsample_int8_greedy_q4_1": "SpecsampleInt8GreedyQ4_1",
  "specsample_int8_greedy_q5_0": "SpecsampleInt8GreedyQ5_0",
  "specsample_int8_greedy_q4_k": "SpecsampleInt8GreedyQ4_K",
  "specsample_int8_greedy_q6_k": "SpecsampleInt8GreedyQ6_K",
  # Cached attention over each query's visible entries (specsample.kernels.attention).
  "specsample_cached_attention": "SpecsampleCachedAttention",
  # A decoder layer's two halves with 8-bit activations (specsample.kernels.decoder_layer).
  "specsample_int8_qkv": "SpecsampleInt8Qkv",
  "specsample_int8_attention_mlp": "SpecsampleInt8AttentionMlp",
}
ENV_VARIABLE = "SPECSAMPLE_MATMUL"  # "xla": never use the kernel
ISA_VARIABLE = "SPECSAMPLE_SMALL_K_ISA"  # "avx2": the AVX2 kernels even on an AVX-512 CPU
# The instruction sets, best first, as small_k_matmul.h numbers them (enum class Isa).
# "avxvnni" runs the AVX2 float kernels and AVX-VNNI's integer dot products for 8-bit
# activations; "avx512f" takes AVX-512 VNNI for those where the CPU has it (else the best
# AVX2-width set); "avx2" takes vpmaddubsw.
ISA_CODES = {"avx512f": 2, "avxvnni": 3, "avx2": 1}
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
def _registered() -> _Loaded:
  """Registers the FFI targets once and picks the instruction set (SPECSAMPLE_SMALL_K_ISA)."""
  requested = os.environ.get(ISA_VARIABLE) or "auto"
  if requested != "auto" and requested not in ISA_CODES:
    raise ValueError(f"{ISA_VARIABLE}={requested!r}: expected auto, {', '.join(ISA_CODES)}")
  try:
    loaded_library = library()
  except NativeUnavailable as error:
    return _Loaded(None, str(error))
  try:
    cpu_bits = loaded_library.SpecsampleSmallKMatmulCpuIsas()
    use_isa = loaded_library.SpecsampleSmallKMatmulUseIsa
    integer_isa = loaded_library.SpecsampleSmallKMatmulIntIsa
    handlers = {target: getattr(loaded_library, symbol) for target, symbol in FFI_TARGETS.items()}
  except AttributeError:  # built from older sources
    return _Loaded(None, out_of_date())
  cpu_isas = tuple(isa for isa, code in ISA_CODES.items() if cpu_bits >> code & 1)
  code = use_isa(ISA_CODES.get(requested, 0))  # 0: the best this CPU has
  if code == 0:
    if not cpu_isas:
      return _Loaded(None, CPU_LACKS_ISA)
    return _Loaded(None, f"{ISA_VARIABLE}={requested}, which this CPU lacks", cpu_isas)
  for target, handler in handlers.items():
    jax.ffi.register_ffi_target(target, jax.ffi.pycapsule(handler), platform="cpu")
  isa = next(isa for isa, isa_code in ISA_CODES.items() if isa_code == code)
  return _Loaded(isa, None, cpu_isas, _INT_ISA_NAMES.get(integer_isa()))


def kernel_available() -> bool:
  """Whether the CPU kernel is built and this CPU can run it."""
  return _registered().isa is not None


def why_not_available() -> str | None:
  """None when the kernel is available, else the reason."""
  return _registered().reason


def instruction_set() -> str | None:
  """The instruction set the kernels run with: "avx512f", "avx2", or None (not available)."""
  return _registered().isa


def integer_instruction_set() -> str | None:
  """The instruction set of the 8-bit-activation kernels (int8_blocks): "avx512vnni",
  "avxvnni" (AVX-VNNI, 256-bit), "avx2" (vpmaddubsw), or None (not available)."""
  return _registered().integer_isa


def supported_instruction_sets() -> tuple[str, ...]:
  """The instruction sets this CPU can run the kernels with, best first (() when the
  extension is not built), whatever SPECSAMPLE_SMALL_K_ISA asks for."""
  return _registered().cpu_isas


def enabled() -> bool:
  """Whether the kernels are available and not switched off (SPECSAMPLE_MATMUL=xla): what
  every op module asks first, at trace time."""
  return os.environ.get(ENV_VARIABLE, "auto") != "xla" and kernel_available()


def choose_again() -> None:
  """Forgets the library loaded and the instruction set chosen: the next question about
  the kernels loads the library, reads SPECSAMPLE_SMALL_K_ISA again and registers the
  targets with its choice (for tests and timings that compare instruction sets in one
  process; functions traced already keep the kernels they were traced with)."""
  _load.cache_clear()
  _registered.cache_clear()
