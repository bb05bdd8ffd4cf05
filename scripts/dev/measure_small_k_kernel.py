"""specsample's small-k CPU kernels against XLA's product, one product shape at a time.

For each shape d x n and row count k: ms per product [k, d] x [d, n] (`matmul`) and
[k, d] x [n, d].T (`matmul_transposed`, the tied output layer), with the kernel and with
XLA's product (SPECSAMPLE_MATMUL=xla), side by side in one run. Each program chains
products with many different weight matrices (about 400 MB, more than the caches), so
the weights come from memory as in a model's forward pass; runs are interleaved, medians.
With --bfloat16, also the kernels on the same weights stored as bfloat16 (half the bytes).

  python scripts/dev/measure_small_k_kernel.py
  python scripts/dev/measure_small_k_kernel.py --shapes 2048x8192 --k 1 8 16
  python scripts/dev/measure_small_k_kernel.py --shapes 576x1536 576x49152 --bfloat16
  SPECSAMPLE_SMALL_K_ISA=avx2 python scripts/dev/measure_small_k_kernel.py --all-rows --k 48 64
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from specsample.kernels import native, small_k


def chain(product):
  """A program applying `product` with every matrix in turn (chained through a scalar);
  measure_block_formats.py uses it too."""

  def run(x, matrices):
    acc = jnp.zeros((), jnp.float32)
    for w in matrices:
      acc = acc + product(x + acc, w)[0, 0]
    return acc

  return jax.jit(run)


def _traced_with(setting: str, program, *args):
  os.environ[native.ENV_VARIABLE] = setting  # read while tracing: compile now
  jax.block_until_ready(program(*args))
  os.environ.pop(native.ENV_VARIABLE)
  return program


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--shapes", nargs="+", default=["768x3072", "768x32128"])
  parser.add_argument("--k", type=int, nargs="+", default=[1, 4, 8, 9, 16, 32])
  parser.add_argument("--repeats", type=int, default=15)
  parser.add_argument("--megabytes", type=float, default=400, help="weights per program")
  parser.add_argument(
    "--all-rows",
    action="store_true",
    help="the kernels up to MAX_ROWS rows, also past this CPU's row limits (to set them)",
  )
  parser.add_argument(
    "--bfloat16", action="store_true", help="also the kernels with bfloat16 weights"
  )
  args = parser.parse_args()
  if not native.kernel_available():
    raise SystemExit(f"the kernel is not available: {native.why_not_available()}")
  if args.all_rows:
    small_k.ROW_LIMITS = dict.fromkeys(small_k.ROW_LIMITS, (small_k.MAX_ROWS, small_k.MAX_ROWS))

  rng = np.random.default_rng(0)
  print(
    f"jax {jax.__version__}, {native.instruction_set()} kernels; ms per product, medians of "
    f"{args.repeats} interleaved runs"
  )
  bf16_columns = " kernel bf16 | transposed kernel bf16 |" if args.bfloat16 else ""
  print(
    "| d x n | k | kernel | XLA | ratio | transposed kernel | XLA transposed | ratio |"
    + bf16_columns
  )
  print("|---|---|---|---|---|---|---|---|" + "---|---|" * args.bfloat16)
  for shape in args.shapes:
    d, n = (int(v) for v in shape.split("x"))
    count = max(2, int(args.megabytes * 1e6 // (4 * d * n)))
    matrices = [jnp.asarray(rng.standard_normal((d, n), np.float32)) for _ in range(count)]
    transposed = [jnp.asarray(np.ascontiguousarray(np.asarray(w).T)) for w in matrices]
    for k in args.k:
      x = jnp.asarray(rng.standard_normal((k, d), np.float32))
      runs = {
        "kernel": (_traced_with("auto", chain(small_k.matmul), x, matrices), matrices),
        "xla": (_traced_with("xla", chain(small_k.matmul), x, matrices), matrices),
        "kernel_t": (
          _traced_with("auto", chain(small_k.matmul_transposed), x, transposed),
          transposed,
        ),
        "xla_t": (
          _traced_with("xla", chain(small_k.matmul_transposed), x, transposed),
          transposed,
        ),
      }
      if args.bfloat16:
        halves = [w.astype(jnp.bfloat16) for w in matrices]
        halves_t = [e.astype(jnp.bfloat16) for e in transposed]
        runs["kernel_bf16"] = (_traced_with("auto", chain(small_k.matmul), x, halves), halves)
        runs["kernel_t_bf16"] = (
          _traced_with("auto", chain(small_k.matmul_transposed), x, halves_t),
          halves_t,
        )
      seconds = {name: [] for name in runs}
      for _ in range(args.repeats):
        for name, (program, weights) in runs.items():
          start = time.perf_counter()
          jax.block_until_ready(program(x, weights))
          seconds[name].append(time.perf_counter() - start)
      ms = {name: statistics.median(values) * 1e3 / count for name, values in seconds.items()}
      print(
        f"| {d} x {n} | {k} | {ms['kernel']:.3f} | {ms['xla']:.3f} | "
        f"{ms['xla'] / ms['kernel']:.2f}x | {ms['kernel_t']:.3f} | {ms['xla_t']:.3f} | "
        f"{ms['xla_t'] / ms['kernel_t']:.2f}x |"
        + (f" {ms['kernel_bf16']:.3f} | {ms['kernel_t_bf16']:.3f} |" if args.bfloat16 else ""),
        flush=True,
      )
      del runs


if __name__ == "__main__":
  main()
