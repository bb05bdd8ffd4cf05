"""Hand-written compute kernels behind plain array functions (no models, no flax).

- `small_k`: `matmul(x, w)` and `matmul_transposed(x, e)` for products with few rows
  (decoding and verification): XLA FFI kernels on CPUs with AVX-512 or AVX2 + FMA that
  stream the weights at memory speed, XLA's own product everywhere else; `row_sums(x)`
  for sums over the last axis that, like the products, do not depend on the row count.
- `blocks`: `BlockMatrix`, weights in GGUF's Q8_0 / Q4_0 / Q4_1 / Q5_0 / Q4_K / Q6_K blocks, and
  `blocks.matmul(x, matrix)`, the transposed kernel dequantizing them in registers.
"""

from specsample.kernels.small_k import (
  MAX_ROWS,
  MAX_ROWS_TRANSPOSED,
  instruction_set,
  kernel_available,
  matmul,
  matmul_transposed,
  row_limit,
  row_sums,
  supported_instruction_sets,
  uses_kernel,
  why_not_available,
)

__all__ = [
  "MAX_ROWS",
  "MAX_ROWS_TRANSPOSED",
  "instruction_set",
  "kernel_available",
  "matmul",
  "matmul_transposed",
  "row_limit",
  "row_sums",
  "supported_instruction_sets",
  "uses_kernel",
  "why_not_available",
]
