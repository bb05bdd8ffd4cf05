"""Every matrix of a GGUF file that the kernel keeps in blocks, checked and timed.

For each 2-D tensor stored in a format of `specsample.kernels.blocks` (Q8_0, Q4_0, Q4_1,
Q4_K, Q6_K), whatever the file's architecture: (1) `blocks.dequantize` equals the gguf
package's dequantization bit for bit; (2) the kernel's product x @ W.T equals the float32
transposed kernel's product of the dequantized weights bit for bit, for k = 1..9 rows, and
each row of it equals that row multiplied alone. Then, per format, the ms per k-row product
of all its matrices (chained in one program, medians of --repeats) against the same
matrices in float32. Prints a table; --out writes it as JSON.

  python scripts/check/check_gguf_blocks.py model.Q4_K_M.gguf --out result.json
"""

from __future__ import annotations

import argparse
import collections
import json

import gguf
import jax
import jax.numpy as jnp
import numpy as np

from specsample.bench.timing import interleaved_medians
from specsample.kernels import blocks, native, small_k

ROWS = (1, 2, 3, 4, 5, 6, 7, 8, 9)


def kept_matrices(path: str) -> dict[str, list[tuple[str, np.ndarray, np.ndarray]]]:
  """{format: [(name, blocks uint8 [out, bytes], float32 values [out, in])]} of the file."""
  reader = gguf.GGUFReader(path)
  kept = collections.defaultdict(list)
  for tensor in reader.tensors:
    format = tensor.tensor_type.name.lower()
    if format in blocks.FORMATS and len(tensor.shape) == 2:
      raw = np.ascontiguousarray(tensor.data)  # [out, row bytes]
      values = gguf.quants.dequantize(raw, tensor.tensor_type).astype(np.float32)
      kept[format].append((tensor.name, raw, values))
  return kept


def _chain(product):
  def run(x, matrices):
    acc = jnp.zeros((), jnp.float32)
    for w in matrices:
      acc = acc + product(x[:, : w.shape[1]] + acc, w)[0, 0]
    return acc

  return jax.jit(run)


def check(format, matrices, rng) -> int:
  """Checks (1) and (2) for every matrix; returns how many were checked."""
  product = jax.jit(lambda x, m: blocks.matmul(x, m))
  float32 = jax.jit(lambda x, e: small_k.matmul_transposed(x, e))
  dequantize = jax.jit(blocks.dequantize)
  for name, raw, values in matrices:
    matrix = blocks.from_numpy(raw, format)
    if not np.array_equal(np.asarray(dequantize(matrix)), values, equal_nan=True):
      raise SystemExit(f"{name} ({format}): dequantize differs from the gguf package's")
    x = rng.standard_normal((max(ROWS), values.shape[1])).astype(np.float32)
    alone = np.concatenate([np.asarray(product(x[r : r + 1], matrix)) for r in range(max(ROWS))])
    for k in ROWS:
      ours = np.asarray(product(x[:k], matrix))
      if not np.array_equal(ours, np.asarray(float32(x[:k], values))):
        raise SystemExit(f"{name} ({format}), k={k}: differs from the float32 kernel's product")
      if not np.array_equal(ours, alone[:k]):
        raise SystemExit(f"{name} ({format}), k={k}: rows differ from the rows alone")
  return len(matrices)


def time_products(format, as_blocks, as_float32, ks, repeats, rng) -> dict:
  """{k: ms of all the matrices' k-row products, in blocks and in float32}, interleaved."""
  widest = max(m.shape[1] for m in as_float32)
  block_chain, float32_chain = _chain(blocks.matmul), _chain(small_k.matmul_transposed)
  timings = {}
  for k in ks:
    x = jnp.asarray(rng.standard_normal((k, widest)).astype(np.float32))
    ours, reference = interleaved_medians(
      [
        lambda x=x: block_chain(x, as_blocks).block_until_ready(),
        lambda x=x: float32_chain(x, as_float32).block_until_ready(),
      ],
      repeats=repeats,
    )
    timings[k] = {"blocks_ms": ours * 1e3, "float32_ms": reference * 1e3}
    print(
      f"  k={k}: {format} {ours * 1e3:.2f} ms, float32 {reference * 1e3:.2f} ms "
      f"({ours / reference:.2f}x)",
      flush=True,
    )
  return timings


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("path", help="a .gguf file")
  parser.add_argument("--k", type=int, nargs="+", default=[1, 2, 4, 8])
  parser.add_argument("--repeats", type=int, default=9)
  parser.add_argument("--out", help="write the results as JSON here")
  args = parser.parse_args()
  if not native.kernel_available():
    raise SystemExit(f"the small-k kernel is not available: {native.why_not_available()}")
  kept = kept_matrices(args.path)
  if not kept:
    raise SystemExit(f"{args.path}: no matrix in {', '.join(blocks.FORMATS)}")
  rng = np.random.default_rng(0)
  record = {"path": args.path, "instruction_set": native.instruction_set(), "formats": {}}
  for format, matrices in sorted(kept.items()):
    shapes = collections.Counter(values.shape for _, _, values in matrices)
    checked = check(format, matrices, rng)
    print(f"{format}: {checked} matrices {dict(shapes)}: equal bit for bit", flush=True)
    as_blocks = [blocks.from_numpy(raw, format) for _, raw, _ in matrices]
    as_float32 = [jnp.asarray(values) for _, _, values in matrices]
    timings = time_products(format, as_blocks, as_float32, args.k, args.repeats, rng)
    record["formats"][format] = {
      "matrices": checked,
      "shapes": {f"{o}x{i}": n for (o, i), n in shapes.items()},
      "stored_bytes": sum(m.nbytes for m in as_blocks),
      "ms": {str(k): t for k, t in timings.items()},
    }
  if args.out:
    with open(args.out, "w") as f:
      json.dump(record, f, indent=2)


if __name__ == "__main__":
  main()
