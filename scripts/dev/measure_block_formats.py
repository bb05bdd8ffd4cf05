"""The transposed small-k kernel per weight format, side by side in one run.

For an [n, d] matrix (stored [out, in], as GGUF stores it) and row counts k: ms per
product x [k, d] @ W.T with W in float32 and bfloat16 (`small_k.matmul_transposed`) and in
GGUF's blocks Q8_0, Q4_0, Q4_1, Q5_0, Q4_K, Q6_K with float32 activations (`blocks.matmul`)
and with 8-bit activations (FORMAT:int8, `int8_blocks.matmul`), the weights streamed in GB/s
(stored bytes / time) and r(k) = t(k) / t(1). Each program chains products with many
distinct matrices (about --megabytes of float32 weights, more than the caches), so the
weights come from memory as in a forward pass; formats are interleaved, medians of
--repeats. The block values are random (the kernel's speed does not depend on them).

  python scripts/dev/measure_block_formats.py --shape 8192x2048 --k 1 2 4 8
  python scripts/dev/measure_block_formats.py --shape 2048x8192 --k 1 5 9 --out result.json
"""

from __future__ import annotations

import argparse
import json

import jax
import jax.numpy as jnp
import numpy as np
from measure_small_k_kernel import chain  # scripts/dev, beside this script

from specsample.bench.timing import interleaved_medians
from specsample.kernels import blocks, int8_blocks, native, small_k

# The float16 fields of each block format (byte offsets): scales and minimums kept finite.
_HALVES = {"q8_0": (0,), "q4_0": (0,), "q4_1": (0, 2), "q5_0": (0,), "q4_k": (0, 2), "q6_k": (208,)}


def random_blocks(rng, n: int, d: int, format: str) -> blocks.BlockMatrix:
  """A [n, d] BlockMatrix of random quantized values with small finite scales."""
  size, weights = blocks.BLOCK_BYTES[format], blocks.BLOCK_WEIGHTS[format]
  raw = rng.integers(0, 256, (n, d // weights, size), dtype=np.uint8)
  for offset in _HALVES[format]:
    halves = rng.uniform(1e-3, 2e-2, (n, d // weights)).astype(np.float16)
    raw[..., offset : offset + 2] = halves.view(np.uint8).reshape(n, d // weights, 2)
  return blocks.from_numpy(raw.reshape(n, -1), format)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--shape", default="8192x2048", help="n x d: outputs x inputs")
  parser.add_argument("--k", type=int, nargs="+", default=[1, 2, 3, 4, 5, 6, 7, 8, 9])
  parser.add_argument("--megabytes", type=int, default=512, help="float32 weights per program")
  parser.add_argument("--repeats", type=int, default=7)
  parser.add_argument(
    "--formats",
    nargs="+",
    default=["float32", "bfloat16", *blocks.FORMATS, *(f + ":int8" for f in blocks.FORMATS)],
    help="float32, bfloat16, a block format (float32 activations) or FORMAT:int8 (8-bit "
    "activations, int8_blocks)",
  )
  parser.add_argument("--out", help="write the table as JSON here")
  args = parser.parse_args()
  if not native.kernel_available():
    raise SystemExit(f"the small-k kernel is not available: {native.why_not_available()}")
  n, d = (int(v) for v in args.shape.split("x"))
  for format in args.formats:
    base = format.removesuffix(":int8")
    if base in blocks.FORMATS and d % blocks.BLOCK_WEIGHTS[base]:
      raise SystemExit(f"{format} needs d a multiple of {blocks.BLOCK_WEIGHTS[base]}, got {d}")
  copies = max(2, args.megabytes * 2**20 // (4 * n * d))
  rng = np.random.default_rng(0)
  matrices, products = {}, {}
  for format in args.formats:
    if format in ("float32", "bfloat16"):
      dtype = jnp.float32 if format == "float32" else jnp.bfloat16
      matrices[format] = [
        jnp.asarray(rng.standard_normal((n, d), np.float32), dtype) for _ in range(copies)
      ]
      products[format] = chain(small_k.matmul_transposed)
    elif format.endswith(":int8"):
      base = format.removesuffix(":int8")
      matrices[format] = [
        int8_blocks.from_gguf_blocks(np.asarray(random_blocks(rng, n, d, base).blocks), base)
        for _ in range(copies)
      ]
      products[format] = chain(int8_blocks.matmul)
    else:
      matrices[format] = [random_blocks(rng, n, d, format) for _ in range(copies)]
      products[format] = chain(blocks.matmul)
  stored = {
    f: (m[0].nbytes if hasattr(m[0], "format") else m[0].size * m[0].dtype.itemsize)
    for f, m in matrices.items()
  }
  print(f"[{n}, {d}] x {copies} matrices, {native.instruction_set()}; ms per product [GB/s] r(k)")
  print("k  " + "".join(f"{f:>22}" for f in args.formats))
  table = {}
  for k in args.k:
    x = jnp.asarray(rng.standard_normal((k, d), np.float32))
    calls = [
      (lambda f=f, x=x: products[f](x, matrices[f]).block_until_ready()) for f in args.formats
    ]
    seconds = interleaved_medians(calls, repeats=args.repeats)
    table[k] = {f: s / copies * 1e3 for f, s in zip(args.formats, seconds, strict=True)}
    cells = []
    for f in args.formats:
      ms = table[k][f]
      r = ms / table[args.k[0]][f]
      cells.append(f"{ms:>8.3f} [{stored[f] / ms / 1e6:>5.1f}] {r:>5.2f}")
    print(f"{k:<3}" + "".join(f"{c:>22}" for c in cells), flush=True)
  if args.out:
    record = {
      "shape": [n, d],
      "copies": copies,
      "stored_bytes": stored,
      "ms": {str(k): row for k, row in table.items()},
      "instruction_set": native.instruction_set(),
      "devices": str(jax.devices()),
    }
    with open(args.out, "w") as f:
      json.dump(record, f, indent=2)


if __name__ == "__main__":
  main()
