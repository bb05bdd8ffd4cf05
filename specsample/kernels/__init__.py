"""Hand-written compute kernels behind plain array functions (no models, no flax).

- `native`: the C++ library setup.py builds, loaded once; it picks the instruction set
  (`kernel_available()`, `instruction_set()`, `why_not_available()`) and registers every
  op's XLA FFI targets. One module per op follows.
- `small_k`: `matmul(x, w)` and `matmul_transposed(x, e)` for products with few rows
  (decoding and verification): XLA FFI kernels on CPUs with AVX-512 or AVX2 + FMA that
  stream the weights at memory speed, XLA's own product everywhere else; `row_sums(x)`
  for sums over the last axis that, like the products, do not depend on the row count.
- `blocks`: `BlockMatrix`, weights in GGUF's Q8_0 / Q4_0 / Q4_1 / Q5_0 / Q4_K / Q6_K blocks, and
  `blocks.matmul(x, matrix)`, the transposed kernel dequantizing them in registers (float32
  arithmetic: the product of the dequantized weights).
- `int8_blocks`: `Int8BlockMatrix`, the same blocks repacked for 8-bit activations, and
  `int8_blocks.matmul(x, matrix)`: activations quantized per row in blocks of 32, integer
  dot products (AVX-512 VNNI, AVX-VNNI, AVX2), as llama.cpp computes;
  `int8_blocks.greedy_matmul(x, matrix)`: the argmax, maximum and top probability of each
  row of that product from the same kernel call (a draft's greedy step).
- `int8_layout`: that repacking (16 rows of W side by side), its inverse and the unpacking
  the NumPy reference and row lookups read.
- `matrices`: `WeightMatrix`, what a layer asks of a weight matrix (`matmul`, `take_rows`,
  `nbytes`), which the plain arrays (wrapped by layout), `BlockMatrix` and
  `Int8BlockMatrix` all give: `weight_matrix(kernel).matmul(x)`.
"""

from specsample.kernels.blocks import BlockMatrix
from specsample.kernels.int8_blocks import Int8BlockMatrix
from specsample.kernels.matrices import BLOCK_MATRICES, WeightMatrix, weight_matrix
from specsample.kernels.native import (
  instruction_set,
  kernel_available,
  supported_instruction_sets,
  why_not_available,
)
from specsample.kernels.small_k import (
  MAX_ROWS,
  MAX_ROWS_TRANSPOSED,
  matmul,
  matmul_transposed,
  row_limit,
  row_sums,
  uses_kernel,
)

__all__ = [
  "BLOCK_MATRICES",
  "BlockMatrix",
  "Int8BlockMatrix",
  "MAX_ROWS",
  "MAX_ROWS_TRANSPOSED",
  "WeightMatrix",
  "instruction_set",
  "kernel_available",
  "matmul",
  "matmul_transposed",
  "row_limit",
  "row_sums",
  "supported_instruction_sets",
  "uses_kernel",
  "weight_matrix",
  "why_not_available",
]
