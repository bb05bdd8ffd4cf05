"""How much a k-token T5 decoder call costs relative to a one-token call on this machine.

Speculative decoding verifies gamma draft tokens with ONE target call over k = gamma + 1
tokens. On accelerators that call costs about one token (the weights are streamed once);
on CPUs XLA's small-M matrix products make it more. This prints r(k) = t(k) / t(1) for a
T5 preset with random weights, side by side in one run (medians, compilation excluded).

  python scripts/measure_verify_cost.py --preset t5-small --k 1 2 4 8
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp

from specsample.bench import time_call
from specsample.models.t5 import T5, preset


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--preset", default="t5-small")
  parser.add_argument("--k", type=int, nargs="+", default=[1, 2, 4, 8])
  parser.add_argument("--batch", type=int, default=1)
  parser.add_argument("--encoder-length", type=int, default=32)
  parser.add_argument("--cache-length", type=int, default=64)
  parser.add_argument("--repeats", type=int, default=20)
  args = parser.parse_args()

  config = preset(args.preset)
  model = T5.init_random(config, seed=0)
  prompts = jnp.ones((args.batch, args.encoder_length), jnp.int32)
  lengths = jnp.full((args.batch,), args.encoder_length, jnp.int32)
  state, _ = jax.jit(lambda m: m.init_state(prompts, lengths, args.cache_length))(model)
  extend = jax.jit(lambda m, s, t: m.extend(s, t, jnp.zeros((args.batch,), jnp.int32))[0])

  print(
    f"{args.preset}: {config.num_parameters / 1e6:.0f}M parameters, batch {args.batch}, "
    f"encoder length {args.encoder_length}, cache {args.cache_length}, jax {jax.__version__} "
    f"on {jax.devices()[0].platform}; medians of {args.repeats}"
  )
  print("| k | ms per call | r(k) = t(k) / t(1) | ms per token |")
  print("|---|---|---|---|")
  base = None
  for k in args.k:
    tokens = jnp.ones((args.batch, k), jnp.int32)
    timing, _ = time_call(lambda t=tokens: extend(model, state, t), repeats=args.repeats)
    base = base or timing.median
    print(
      f"| {k} | {timing.median * 1e3:.2f} | {timing.median / base:.2f} | "
      f"{timing.median * 1e3 / k:.2f} |",
      flush=True,
    )


if __name__ == "__main__":
  main()
