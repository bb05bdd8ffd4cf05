"""How much a k-token T5 decoder call costs relative to a one-token call on this machine.

Speculative decoding verifies gamma draft tokens with ONE target call over k = gamma + 1
tokens. On accelerators that call costs about one token (the weights are streamed once);
on CPUs XLA's small-M matrix products make it more. This prints r(k) = t(k) / t(1) for a
T5 or decoder-only (llama-134m) preset with random weights, side by side in one run
(medians, compilation excluded).
With --option, each XLA compiler-option variant is measured too, and with --xla-matmul
the same model with every product left to XLA (SPECSAMPLE_MATMUL=xla, no specsample
small-k kernel), the variants' runs interleaved so that machine noise hits them alike.

  python scripts/dev/measure_verify_cost.py --preset t5-small --k 1 2 4 8
  python scripts/dev/measure_verify_cost.py --preset t5-base \
    --option xla_cpu_experimental_ynn_fusion_type=
  python scripts/dev/measure_verify_cost.py --preset llama-134m --k 1 5 9 --xla-matmul
"""

from __future__ import annotations

import argparse
import os
import statistics

import jax
import jax.numpy as jnp

from specsample.bench import time_call
from specsample.kernels import native
from specsample.models import decoder_only
from specsample.models.t5 import T5, preset


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--preset", default="t5-small", help="a T5 or decoder-only preset")
  parser.add_argument("--k", type=int, nargs="+", default=[1, 2, 4, 8])
  parser.add_argument("--batch", type=int, default=1)
  parser.add_argument("--encoder-length", type=int, default=32)
  parser.add_argument("--cache-length", type=int, default=64)
  parser.add_argument("--repeats", type=int, default=20)
  parser.add_argument(
    "--option",
    action="append",
    default=[],
    metavar="NAME=VALUE",
    help="an XLA compiler option variant to measure beside the default (repeatable)",
  )
  parser.add_argument(
    "--xla-matmul",
    action="store_true",
    help="also measure with every product left to XLA (no specsample small-k kernel)",
  )
  args = parser.parse_args()

  if args.preset in decoder_only.PRESETS:
    config = decoder_only.preset(args.preset)
    model = decoder_only.DecoderOnly.init_random(config, seed=0)
  else:
    config = preset(args.preset)
    model = T5.init_random(config, seed=0)
  prompts = jnp.ones((args.batch, args.encoder_length), jnp.int32)
  lengths = jnp.full((args.batch,), args.encoder_length, jnp.int32)
  state, _ = jax.jit(lambda m: m.init_state(prompts, lengths, args.cache_length))(model)
  matmul = f"{native.instruction_set()} kernel" if native.kernel_available() else "XLA"
  variants = {f"default ({matmul} products)": ({}, "auto")}
  for option in args.option:
    name, _, value = option.partition("=")
    variants[option] = ({name: value}, "auto")
  if args.xla_matmul:
    variants["XLA products (SPECSAMPLE_MATMUL=xla)"] = ({}, "xla")
  extends = {
    label: jax.jit(
      lambda m, s, t: m.extend(s, t, jnp.zeros((args.batch,), jnp.int32))[0],
      compiler_options=options or None,
    )
    for label, (options, _) in variants.items()
  }

  print(
    f"{args.preset}: {config.num_parameters / 1e6:.0f}M parameters, batch {args.batch}, "
    f"encoder length {args.encoder_length}, cache {args.cache_length}, jax {jax.__version__} "
    f"on {jax.devices()[0].platform}; medians of {args.repeats}"
  )
  print("| variant | k | ms per call | r(k) = t(k) / t(1) | ms per token |")
  print("|---|---|---|---|---|")
  medians = {(label, k): [] for label in variants for k in args.k}
  for label, extend in extends.items():  # compile every program first
    os.environ[native.ENV_VARIABLE] = variants[label][1]  # read while tracing
    for k in args.k:
      jax.block_until_ready(extend(model, state, jnp.ones((args.batch, k), jnp.int32)))
  os.environ.pop(native.ENV_VARIABLE)
  for _ in range(args.repeats):  # interleaved: one run of each program per round
    for label, extend in extends.items():
      for k in args.k:
        tokens = jnp.ones((args.batch, k), jnp.int32)
        timing, _ = time_call(lambda t=tokens, f=extend: f(model, state, t), repeats=1)
        medians[label, k].append(timing.median)
  for label in variants:
    base = statistics.median(medians[label, args.k[0]])
    for k in args.k:
      median = statistics.median(medians[label, k])
      print(
        f"| {label} | {k} | {median * 1e3:.2f} | {median / base:.2f} | {median * 1e3 / k:.2f} |",
        flush=True,
      )


if __name__ == "__main__":
  main()
