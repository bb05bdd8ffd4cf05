"""Installs specsample; all metadata lives in pyproject.toml.

The one native part is built here: the CPU kernel for matrix products with few rows
(`specsample/kernels/small_k_matmul.cc`, an XLA FFI custom call; see
specsample/kernels/small_k.py). It compiles against the XLA FFI headers that ship in the
jaxlib wheel (a build requirement in pyproject.toml). It is optional: without a C++17
compiler the install still succeeds and every product goes to XLA
(`specsample.kernels.native.kernel_available()` says which).
"""

import os

from setuptools import Extension, setup


def _xla_ffi_include_dir() -> str:
  import jaxlib  # installed in the build environment (pyproject.toml [build-system])

  return os.path.join(os.path.dirname(jaxlib.__file__), "include")


setup(
  ext_modules=[
    Extension(
      "specsample.kernels._small_k_matmul",
      sources=[
        "specsample/kernels/small_k_matmul.cc",
        "specsample/kernels/attention.cc",
        "specsample/kernels/decoder_layer.cc",
        "specsample/kernels/token_queue.cc",
      ],
      depends=[
        "specsample/kernels/small_k_matmul.h",
        "specsample/kernels/small_k_matmul_simd.h",
        "specsample/kernels/int8_matmul.h",
        "specsample/kernels/int8_matmul_simd.h",
        "specsample/kernels/spin_pool.h",
        "specsample/kernels/attention.h",
        "specsample/kernels/attention_simd.h",
        "specsample/kernels/decoder_layer_simd.h",
        "specsample/kernels/kernel_ops.h",
      ],
      include_dirs=[_xla_ffi_include_dir()],
      # AVX-512 and AVX2 code is confined to functions marked target("avx512f,...") or
      # target("avx2,fma") and only called after a run-time CPU check, so the library loads
      # on any x86-64 CPU.
      # -ffp-contract=off: no multiply-add is fused unless the code says so (the 8-bit
      # kernels' float steps are specified exactly, int8_blocks.reference_matmul).
      extra_compile_args=["-O3", "-std=c++17", "-w", "-ffp-contract=off"],
      language="c++",
      optional=True,
    )
  ]
)
