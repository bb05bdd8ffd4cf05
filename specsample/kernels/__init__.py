"""Hand-written compute kernels behind plain array functions (no models, no flax).

- `small_k`: `matmul(x, w)` for products with few rows (decoding and verification), with
  an XLA FFI kernel on CPUs that stream weights at memory speed, and XLA's own product
  everywhere else.
"""

from specsample.kernels.small_k import (
  MAX_ROWS,
  MAX_ROWS_TRANSPOSED,
  kernel_available,
  matmul,
  matmul_transposed,
  uses_kernel,
)

__all__ = [
  "MAX_ROWS",
  "MAX_ROWS_TRANSPOSED",
  "kernel_available",
  "matmul",
  "matmul_transposed",
  "uses_kernel",
]
