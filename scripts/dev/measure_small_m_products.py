"""How fast is one weight product over k rows on this CPU, for k = 1 .. 256?

The verify cost r(k) = t(k tokens) / t(1 token) of a large target is, layer by layer,
the cost of a [k, d_in] x [d_in, d_out] product over one of a single row. At k = 1 the
product streams its weights from memory; at small k it should cost about the same (the
weights are read once whatever k is) until arithmetic takes over. This script times one
float32 product side by side with every matrix library installed here (XLA as JAX
compiles it by default, XLA with YNNPACK off, XLA with the weights compiled into the
program as constants, NumPy's BLAS, PyTorch) and prints, per k:
milliseconds, r(k), GFLOP/s, and the roofline bound on r(k) from the best bandwidth
(k = 1) and the best arithmetic rate (large k) measured in the same run.

  python scripts/dev/measure_small_m_products.py [--d-in 2048 --d-out 8192] \
    [--k 1 2 4 8 9 16 64 256]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np


def median_ms(fn, repeats: int) -> float:
  fn()
  fn()
  runs = []
  for _ in range(repeats):
    start = time.perf_counter()
    fn()
    runs.append(time.perf_counter() - start)
  return 1e3 * statistics.median(runs)


def libraries(weights: np.ndarray) -> dict:
  """name -> function(x: float32[k, d_in] as numpy) -> a function that runs x @ weights."""
  on_device = jnp.asarray(weights)
  default = jax.jit(lambda x, w: x @ w)
  ynn_off = jax.jit(
    lambda x, w: x @ w, compiler_options={"xla_cpu_experimental_ynn_fusion_type": ""}
  )

  def xla(compiled):
    def make(x):
      x = jnp.asarray(x)
      return lambda: compiled(x, on_device).block_until_ready()

    return make

  constant = jax.jit(lambda x: x @ on_device)  # weights baked into the program

  def xla_constant(x):
    x = jnp.asarray(x)
    return lambda: constant(x).block_until_ready()

  found = {
    "XLA (default)": xla(default),
    "XLA, YNNPACK off": xla(ynn_off),
    "XLA, weights as constants": xla_constant,
    "NumPy BLAS": lambda x: lambda: x @ weights,
  }
  try:
    import torch
  except ImportError:
    return found
  torch.set_num_threads(os.cpu_count() or 1)
  weights_t = torch.from_numpy(weights)

  def torch_product(x):
    xt = torch.from_numpy(x)

    def run():
      with torch.inference_mode():
        return xt @ weights_t

    return run

  found[f"PyTorch {torch.__version__}"] = torch_product
  return found


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--d-in", type=int, default=2048)
  parser.add_argument("--d-out", type=int, default=8192)
  parser.add_argument("--k", type=int, nargs="+", default=[1, 2, 4, 8, 9, 16, 64, 256])
  parser.add_argument("--repeats", type=int, default=30)
  args = parser.parse_args()
  if 1 not in args.k:
    parser.error("--k must include 1 (the reference of r(k))")
  rng = np.random.default_rng(0)
  weights = rng.standard_normal((args.d_in, args.d_out), dtype=np.float32)
  megabytes = weights.nbytes / 2**20
  print(
    f"jax {jax.__version__}; one float32 product [k, {args.d_in}] x [{args.d_in}, "
    f"{args.d_out}] ({megabytes:.0f} MiB of weights); medians of {args.repeats} runs"
  )
  results = {}  # (library, k) -> ms
  products = libraries(weights)
  for k in sorted(args.k):
    x = rng.standard_normal((k, args.d_in), dtype=np.float32)
    for name, make in products.items():
      results[name, k] = median_ms(make(x), args.repeats)
  names = list(dict.fromkeys(name for name, _ in results))
  flops = {k: 2.0 * k * args.d_in * args.d_out for k in args.k}
  bandwidth = max(weights.nbytes / (results[name, 1] / 1e3) for name in names)  # bytes/s
  peak = max(flops[k] / (ms / 1e3) for (_, k), ms in results.items())  # FLOP/s
  print(
    f"best bandwidth at k = 1: {bandwidth / 1e9:.0f} GB/s; best arithmetic rate: "
    f"{peak / 1e9:.0f} GFLOP/s"
  )
  print("| k | " + " | ".join(f"{n} ms (r, GFLOP/s)" for n in names) + " | roofline bound on r |")
  print("|---" * (len(names) + 2) + "|")
  for k in sorted(args.k):
    cells = []
    for name in names:
      ms = results[name, k]
      cells.append(f"{ms:.2f} ({ms / results[name, 1]:.2f}, {flops[k] / ms / 1e6:.0f})")
    memory_s, compute_s = weights.nbytes / bandwidth, flops[k] / peak
    print(f"| {k} | " + " | ".join(cells) + f" | {max(memory_s, compute_s) / memory_s:.2f} |")


if __name__ == "__main__":
  main()
