"""Cached attention alone: k query rows against the cache, as a verify call of k tokens reads it.

SmolLM2-135M's shapes (9 query heads over 3 cache heads of 64 numbers, 30 layers), a filled
cache of --context entries (float32, capacity 2048), random numbers; each program a compiled
loop of 20 steps x 30 attention calls, timed side by side in interleaved rounds (medians of
--repeats). Prints ms per step (30 layers) for each k and r(k) = t(k) / t(1). The cache here
is small enough to stay in the processor's caches, so this measures the kernel's arithmetic;
in a model's step the layers' caches come from memory (scripts/dev/measure_step_parts.py).

  python scripts/dev/measure_attention.py [--context 500] [--k 1 2 4 8 16] [--repeats 9]
"""

from __future__ import annotations

import argparse
import sys

import jax
import jax.numpy as jnp
import numpy as np

from specsample.bench import time_calls
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
  args = parser.parse_args()
  if not 0 < args.context <= CAPACITY - max(args.k):
    parser.error(f"--context must be in 1..{CAPACITY - max(args.k)}")
  rng = np.random.default_rng(0)
  keys = jnp.asarray(rng.standard_normal((1, CAPACITY, KV_HEADS, HEAD_DIM)), jnp.float32)
  values = jnp.asarray(rng.standard_normal((1, CAPACITY, KV_HEADS, HEAD_DIM)), jnp.float32)
  calls = [attention_program(k, args.context, keys, values, rng) for k in args.k]
  timings, _ = time_calls(calls, repeats=args.repeats)
  ms = [1e3 * t.median / STEPS for t in timings]
  print(f"cached attention, {LAYERS} layers, context {args.context}; ms per step, medians of {args.repeats}")
  print("| k | ms | r(k) |")
  print("|---|---|---|")
  for k, t in zip(args.k, ms, strict=True):
    print(f"| {k} | {t:.3f} | {t / ms[0]:.2f} |")
  return 0


if __name__ == "__main__":
  sys.exit(main())
