"""Hand-written compute kernels behind plain array functions (no models, no flax).

- `small_k`: `matmul(x, w)` and `matmul_transposed(x, e)` for products with few rows
  (decoding and verification): XLA FFI kernels on CPUs with AVX-512 or AVX2 + FMA that
  stream the weights at memory speed, XLA's own product everywhere else; `row_sums(x)`
  for sums over the last axis that, like the products, do not depend on the row count.
- `blocks`: `BlockMatrix`, weights in GGUF's Q8_0 / Q4_0 / Q4_1 / Q5_0 / Q4_K / Q6_K blocks, and
  `blocks.matmul(x, matrix)`, the transposed kernel dequantizing them in registers (float32
  arithmetic: the product of the dequantized weights).
- `int8_blocks`: `Int8BlockMatrix`, the same blocks repacked for 8-bit activations, and
  `int8_blocks.matmul(x, matrix)`: activations quantized per row in blocks of 32, integer
  dot products (AVX-512 VNNI, AVX-VNNI, AVX2), as llama.cpp computes.
"""

from specsample.kernels.blocks import BlockMatrix
from specsample.kernels.int8_blocks import Int8BlockMatrix
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

# The matrices kept in GGUF blocks, either arithmetic.
BLOCK_MATRICES = (BlockMatrix, Int8BlockMatrix)

__all__ = [
  "BLOCK_MATRICES",
  "BlockMatrix",
  "Int8BlockMatrix",
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
