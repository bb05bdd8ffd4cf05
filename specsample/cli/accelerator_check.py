"""The prepared accelerator check: paper-shaped pairs with random bfloat16 weights, timed on
the default device (GPU/TPU; CPU with --tiny), one table and a JSON file.

Pairs (random weights: alpha is whatever two random models give; the costs, the
compilation, the loop's overhead and the cost model's efficiency are what this checks):
  t5-large  target + t5-small draft, gamma 3
  t5-11b    target + t5-small draft, gamma 7 (the paper's T5-XXL, Table 2's EnDe gamma)
  llama3-8b target + llama3-1b draft, gamma 4
each at batch 1 and 8, temperature 1 (token-wise verification), 128-token prompts,
64 new tokens. Per row: t_target(1), r(gamma+1) = t_target(gamma+1) / t_target(1),
c = t_draft(1) / t_target(1) (single steps inside compiled loops, side by side),
compile seconds, speculative vs autoregressive wall time (same rounds, medians), alpha,
the measured speedup, the prediction with r folded in, efficiency = measured /
prediction, and the loop's overhead per iteration (wall time minus the model calls the
cost model charges). `--tiny` swaps in tiny shapes of the same families (CPU, tests).

  PYTHONPATH=. python scripts/accelerator_check.py --out accelerator_check.json
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import pathlib
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from specsample import SamplingConfig, generate, speculative_generate
from specsample.bench.costs import clear_step_programs, interleaved_step_seconds
from specsample.bench.timing import measured_speedup, time_calls
from specsample.core.speedup import theoretical_speedup
from specsample.decoding import clear_compiled_programs
from specsample.models.decoder_only import DecoderOnly, DecoderOnlyConfig
from specsample.models.t5 import T5, preset
from specsample.models.t5.config import T5Config
from specsample.scaling.plan import resolve_config


@dataclasses.dataclass(frozen=True)
class Pair:
  name: str
  target: T5Config | DecoderOnlyConfig
  draft: T5Config | DecoderOnlyConfig
  gamma: int


def pairs(tiny: bool) -> list[Pair]:
  if not tiny:
    return [
      Pair("t5-large + t5-small", preset("t5-large"), preset("t5-small"), 3),
      Pair("t5-11b + t5-small", preset("t5-11b"), preset("t5-small"), 7),
      Pair("llama3-8b + llama3-1b", resolve_config("llama3-8b"), resolve_config("llama3-1b"), 4),
    ]
  t5 = T5Config(
    vocab_size=512, d_model=64, num_heads=2, head_dim=32, mlp_dim=128,
    num_encoder_layers=2, num_decoder_layers=2,
  )  # fmt: skip
  llama = DecoderOnlyConfig(
    vocab_size=512, d_model=64, num_heads=4, num_kv_heads=2, head_dim=16, mlp_dim=128,
    num_layers=2,
  )  # fmt: skip
  return [
    Pair("tiny t5", t5, t5.replace(num_decoder_layers=1, d_model=32, head_dim=16), 3),
    Pair("tiny decoder-only", llama, llama.replace(num_layers=1), 4),
  ]


def random_model(config, dtype: str, seed: int):
  config = config.replace(dtype=dtype)
  cls = T5 if isinstance(config, T5Config) else DecoderOnly
  return jax.jit(lambda: cls.init_random(config, seed=seed))()


def check_row(target, draft, gamma: int, batch: int, args) -> dict:
  rng = np.random.default_rng(batch)
  vocab = target.vocab_size
  prompts = jnp.asarray(rng.integers(3, vocab, (batch, args.prompt_length)), jnp.int32)
  lengths = jnp.full((batch,), args.prompt_length, jnp.int32)
  t1, t_verify, t_draft = interleaved_step_seconds(
    [(target, 1), (target, gamma + 1), (draft, 1)],
    prompts,
    prompt_lengths=lengths,
    repeats=args.repeats * 3,
  )
  sampling = SamplingConfig(temperature=1.0)
  common = dict(prompt_lengths=lengths, max_new_tokens=args.max_new_tokens, sampling=sampling)
  (spec, plain), (out, plain_out) = time_calls(
    [
      lambda: speculative_generate(target, draft, prompts, gamma=gamma, **common),
      lambda: generate(target, prompts, **common),
    ],
    repeats=args.repeats,
  )
  c, r = t_draft / t1, t_verify / t1
  alpha = out.stats.alpha
  predicted = theoretical_speedup(alpha, gamma, c, r)
  measured = measured_speedup(
    plain.median, int(np.sum(plain_out.lengths)), spec.median, int(np.sum(out.lengths))
  )
  calls = max(1, int(out.stats.target_calls))
  return {
    "batch": batch,
    "gamma": gamma,
    "t_target_1_ms": 1e3 * t1,
    "r": r,
    "c": c,
    "compile_seconds": spec.compile_seconds,
    "autoregressive_compile_seconds": plain.compile_seconds,
    "alpha": alpha,
    "tokens_per_target_call": out.stats.tokens_per_target_call,
    "speculative_seconds": spec.median,
    "autoregressive_seconds": plain.median,
    "measured_speedup": measured,
    "predicted_speedup": predicted,
    "efficiency": measured / predicted,
    "overhead_ms_per_iteration": 1e3 * (spec.median / calls - gamma * t_draft - t_verify),
  }


def run(args) -> dict:
  device = jax.devices()[0]
  report = {
    "device": f"{device.platform}: {device.device_kind}",
    "jax": jax.__version__,
    "dtype": args.dtype,
    "prompt_length": args.prompt_length,
    "max_new_tokens": args.max_new_tokens,
    "rows": [],
  }
  for pair in pairs(args.tiny):
    if args.pairs and pair.name not in args.pairs:
      continue
    start = time.perf_counter()
    target = random_model(pair.target, args.dtype, seed=0)
    draft = random_model(pair.draft, args.dtype, seed=1)
    jax.block_until_ready((target, draft))
    made = time.perf_counter() - start
    for batch in args.batches:
      row = {
        "pair": pair.name,
        "init_seconds": made,
        **check_row(target, draft, pair.gamma, batch, args),
      }
      report["rows"].append(row)
      print_row(row)
      clear_compiled_programs()
      clear_step_programs()
    del target, draft
    gc.collect()
  return report


HEADER = (
  f"{'pair':<22} {'batch':>5} {'gamma':>5} {'t(1) ms':>8} {'r':>5} {'c':>6} {'compile s':>9} "
  f"{'alpha':>5} {'S meas.':>7} {'S pred.':>7} {'eff.':>5} {'overhead ms':>11}"
)


def print_row(row: dict) -> None:
  print(
    f"{row['pair']:<22} {row['batch']:>5} {row['gamma']:>5} {row['t_target_1_ms']:>8.2f} "
    f"{row['r']:>5.2f} {row['c']:>6.3f} {row['compile_seconds']:>9.1f} {row['alpha']:>5.2f} "
    f"{row['measured_speedup']:>6.2f}x {row['predicted_speedup']:>6.2f}x "
    f"{row['efficiency']:>5.2f} {row['overhead_ms_per_iteration']:>11.2f}",
    flush=True,
  )


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--tiny", action="store_true", help="tiny shapes (CPU, tests)")
  parser.add_argument("--pairs", nargs="+", help="only these pairs (names as in the table)")
  parser.add_argument("--batches", type=int, nargs="+", default=[1, 8])
  parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
  parser.add_argument("--prompt-length", type=int, default=128)
  parser.add_argument("--max-new-tokens", type=int, default=64)
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--out", type=pathlib.Path, default=pathlib.Path("accelerator_check.json"))
  args = parser.parse_args(argv)
  if args.out.exists():
    parser.error(f"{args.out} exists; remove it first")
  print(HEADER, flush=True)
  report = {"rows": []}
  try:
    report = run(args)
  except KeyboardInterrupt:
    print("interrupted", file=sys.stderr)
    return 130
  finally:
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"written: {args.out}", file=sys.stderr)
  return 0
