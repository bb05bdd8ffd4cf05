"""Cached attention alone: k query rows against the cache, as a verify call of k tokens reads it.

SmolLM2-135M's shapes (9 query heads over 3 cache heads of 64 numbers, 30 layers), a filled
cache of --context entries (capacity 2048; --caches float32 bfloat16 times both kinds side by
side), random numbers; each program a compiled
loop of 20 steps x 30 attention calls, timed side by side in interleaved rounds (medians of
--repeats). Prints ms per step (30 layers) for each k and r(k) = t(k) / t(1). The cache here
is small enough to stay in the processor's caches, so this measures the kernel's arithmetic;
in a model's step the layers' caches come from memory (scripts/dev/measure_step_parts.py).

  python scripts/dev/measure_attention.py [--context 500] [--k 1 2 4 8 16] [--repeats 9] \
      [--caches float32 bfloat16]
"""

from __future__ import annotations

import argparse
import sys

import jax
import jax.numpy as jnp
import numpy as np
from measuring import ms_per_call  # scripts/dev, beside this script

from specsample.kernels.attention import cached_attention

HEADS, KV_HEADS, HEAD_DIM, CAPACITY, LAYERS, STEPS = 9, 3, 64, 2048, 30, 20


def attention_program(k: int, context: int, keys, values, rng):
  queries = jnp.asarray(rng.standard_normal((1, k, HEADS, HEAD_DIM)), jnp.float32)
  positions = context + jnp.arange(k)  # query i sees the cache and the i + 1 tokens of the call
  allowed = (jnp.arange(CAPACITY)[None, :] <= positions[:, None])[None]  # [1, k, capacity]

  @jax.jit
  def run(queries, keys, values):
    def body(i, total):
      out = cached_attention(queries + total, keys, values, allowed, HEAD_DIM**-0.5)
      return total + out[0, 0, 0, 0] * 1e-9  # each call depends on the last

    return jax.lax.fori_loop(0, LAYERS * STEPS, body, jnp.zeros(()))

  return lambda: run(queries, keys, values)


def main() -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--context", type=int, default=500)
  parser.add_argument("--k", type=int, nargs="+", default=[1, 2, 4, 8, 16])
  parser.add_argument("--repeats", type=int, default=9)
  parser.add_argument("--caches", nargs="+", choices=["float32", "bfloat16"], default=["float32"])
  args = parser.parse_args()
  if not 0 < args.context <= CAPACITY - max(args.k):
    parser.error(f"--context must be in 1..{CAPACITY - max(args.k)}")
  rng = np.random.default_rng(0)
  keys = jnp.asarray(rng.standard_normal((1, CAPACITY, KV_HEADS, HEAD_DIM)), jnp.float32)
  values = jnp.asarray(rng.standard_normal((1, CAPACITY, KV_HEADS, HEAD_DIM)), jnp.float32)
  runs = [(cache, k) for cache in args.caches for k in args.k]
  calls = [
    attention_program(k, args.context, keys.astype(cache), values.astype(cache), rng)
    for cache, k in runs
  ]
  # The table alike in shape to measure_step_parts.py's: each script prints its own columns.
  ms = ms_per_call(calls, runs, args.repeats, STEPS)
  print(
    f"cached attention, {LAYERS} layers, context {args.context}; "
    f"ms per step, medians of {args.repeats}"
  )
  print("| cache | k | ms | r(k) |")
  print("|---|---|---|---|")
  for cache, k in runs:
    print(f"| {cache} | {k} | {ms[cache, k]:.3f} | {ms[cache, k] / ms[cache, args.k[0]]:.2f} |")
  return 0


if __name__ == "__main__":
  sys.exit(main())
