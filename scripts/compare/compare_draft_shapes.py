"""Draft shapes side by side: the fixed chain (token-wise and block verification), adaptive
draft length, K-chain trees and dynamic trees, against plain decoding, on one pair, in one
run.

Each prompt is decoded alone (batch 1, all prompts padded to one width so one program
serves them all) by every decoder in the same interleaved rounds (bench.timing.time_calls:
one untimed compiling call each, then --repeats rounds; medians summed over prompts).
Trees get the same verified-token budget as the chain: K chains of gamma / K tokens score
gamma + 1 tokens per target call, as the chain of gamma does. Adaptive drafting gets the
chain's gamma as its maximum; dynamic trees (--dynamic N ...) score N + 1 tokens per call,
--depth deep. `--default-chain` adds the default pair's chain (`load_pair()`: SmolLM2's
feature draft behind prompt lookup, gamma --gamma) to the same rounds, beside the token
draft's shapes. Greedy outputs are checked against plain greedy decoding.

  python scripts/compare/compare_draft_shapes.py --pair smollm2 --gamma 4 --chains 2 4 \
      --num-prompts 8 --stride 5 --max-new-tokens 64 --out docs/bench/draft_shapes/smollm2.json
  python scripts/compare/compare_draft_shapes.py --pair ende --gamma 4 --chains 2 4 \
      --out docs/bench/draft_shapes/ende.json
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

import numpy as np

from specsample import (
  AdaptiveDraft,
  DynamicTree,
  SamplingConfig,
  generate,
  speculative_generate,
)
from specsample.bench.pair import pad_to_width
from specsample.bench.timing import measured_speedup, time_calls


def load(pair: str, num_prompts: int, stride: int, weights: str = "float32", lookup=False):
  """(target, draft, prompts as token lists, description) of a bundled pair (SmolLM2's with
  its token draft, with `weights` as `specsample generate --weights`, and prompt lookup in
  front of the draft when `lookup`)."""
  from specsample import bundled
  from specsample.pairs import load_pair

  if pair == "ende":
    loaded = load_pair("bundled:ende")
    lines = (bundled.pair_dir("ende") / "test.tsv").read_text().splitlines()
    texts = [line.split("\t")[0] for line in lines if line.strip()][::stride][:num_prompts]
    prompts = [loaded.tokenizer.encode(loaded.prefix + t) for t in texts]
    return loaded.target, loaded.draft, prompts, "T5 ende"
  loaded = load_pair(None, "bundled:token", weights=weights, prompt_lookup=lookup)  # trees: tokens
  target, draft, tokenizer = loaded.target, loaded.draft, loaded.tokenizer
  records = [json.loads(line) for line in (bundled.SMOLLM2_DIR / "prompts.jsonl").open()]
  prompts = [
    tokenizer.apply_chat_template([{"role": "user", "content": r["prompt"]}])
    for r in records[::stride][:num_prompts]
  ]
  return target, draft, prompts, loaded.title


def decoders(target, draft, gamma: int, chains, sampling: SamplingConfig, args, default=None):
  """name -> speculative_generate keywords (None: plain decoding; "models": another pair's
  (target, draft), `default`'s for "default_chain")."""
  common = dict(gamma=gamma, sampling=sampling, max_new_tokens=args.max_new_tokens)
  shapes = {"autoregressive": None, "chain_token": dict(common, verification="token")}
  if default is not None:
    shapes["default_chain"] = dict(common, models=(default.target, default.draft))
  if not sampling.is_greedy:
    shapes["chain_block"] = dict(common, verification="block")
  if not args.no_adaptive:
    shapes["adaptive"] = dict(common, adaptive=AdaptiveDraft(threshold=args.threshold))
  for k in chains:  # K chains of gamma / K tokens: the chain's verified-token budget
    shapes[f"tree_{k}x{gamma // k}"] = dict(common, gamma=gamma // k, tree=k)
  for nodes in args.dynamic:  # dynamic trees of N nodes (N + 1 verified tokens per call)
    tree = DynamicTree(nodes=nodes, branching=args.branching)
    shapes[f"dynamic_{nodes}"] = dict(common, gamma=args.depth, tree=tree)
  return shapes


def run(args) -> dict:
  target, draft, prompts, description = load(
    args.pair, args.num_prompts, args.stride, args.weights, args.lookup
  )
  default = None
  if args.default_chain:
    from specsample.pairs import load_pair

    default = load_pair(None, None, weights=args.weights)  # the feature draft, behind lookup
  width = max(map(len, prompts))
  rows = [pad_to_width([p], width) for p in prompts]
  results = {
    "pair": description,
    "prompts": len(prompts),
    "prompt_stride": args.stride,
    "max_new_tokens": args.max_new_tokens,
    "repeats": args.repeats,
    "gamma": args.gamma,
    "runs": [],
  }
  for temperature in args.temperatures:
    sampling = SamplingConfig(temperature=temperature)
    shapes = decoders(target, draft, args.gamma, args.chains, sampling, args, default)
    seconds = dict.fromkeys(shapes, 0.0)
    tokens = dict.fromkeys(shapes, 0)
    stats = {name: {"accepted": 0, "iterations": 0, "target_calls": 0} for name in shapes}
    outputs = {name: [] for name in shapes}
    for index, (array, lengths) in enumerate(rows):
      calls = []
      for options in shapes.values():
        if options is None:
          calls.append(
            lambda a=array, n=lengths, i=index, t=sampling: generate(
              target, a, prompt_lengths=n, sampling=t,
              max_new_tokens=args.max_new_tokens, seed=i,
            )
          )  # fmt: skip
        else:
          models = options.get("models", (target, draft))
          keywords = {key: value for key, value in options.items() if key != "models"}
          calls.append(
            lambda a=array, n=lengths, i=index, m=models, o=keywords: speculative_generate(
              *m, a, prompt_lengths=n, seed=i, **o
            )
          )
      timings, outs = time_calls(calls, repeats=args.repeats, warmup=index == 0)
      for name, timing, out in zip(shapes, timings, outs, strict=True):
        seconds[name] += timing.median
        tokens[name] += int(np.sum(out.lengths))
        outputs[name].append(out.sequences()[0])
        if shapes[name] is not None:
          stats[name]["accepted"] += int(np.sum(out.stats.accepted))
          stats[name]["iterations"] += int(np.sum(out.stats.iterations))
          stats[name]["target_calls"] += int(out.stats.target_calls)
      print(f"  T={temperature:g} prompt {index + 1}/{len(rows)}", file=sys.stderr)
    for name in shapes:
      entry = {"temperature": temperature, "decoder": name, "seconds": seconds[name]}
      entry["speedup_over_autoregressive"] = measured_speedup(
        seconds["autoregressive"], tokens["autoregressive"], seconds[name], tokens[name]
      )
      if shapes[name] is not None:
        s = stats[name]
        entry["tokens_per_target_call"] = tokens[name] / s["iterations"]
        entry["time_vs_chain_token"] = seconds[name] / seconds["chain_token"]
        if sampling.is_greedy:
          entry["greedy_identical"] = outputs[name] == outputs["autoregressive"]
      results["runs"].append(entry)
  return results


def print_table(results: dict) -> None:
  print(f"{results['pair']}, {results['prompts']} prompts, chain gamma {results['gamma']}")
  print(f"{'T':>4} {'decoder':<16} {'tok/call':>9} {'seconds':>9} {'vs AR':>7} {'vs chain':>9}")
  for r in results["runs"]:
    tokens = r.get("tokens_per_target_call", 1.0)
    versus = r.get("time_vs_chain_token", float("nan"))
    same = {True: "  greedy =", False: "  greedy DIFFERS"}.get(r.get("greedy_identical"), "")
    print(
      f"{r['temperature']:>4g} {r['decoder']:<16} {tokens:>9.2f} {r['seconds']:>9.2f} "
      f"{r['speedup_over_autoregressive']:>6.2f}x {versus:>9.2f}{same}"
    )


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--pair", choices=["ende", "smollm2"], default="smollm2")
  parser.add_argument("--gamma", type=int, default=4)
  parser.add_argument("--chains", type=int, nargs="*", default=[2, 4], help="K of each tree")
  parser.add_argument(
    "--dynamic", type=int, nargs="*", default=[], help="N of each dynamic tree (N nodes)"
  )
  parser.add_argument("--depth", type=int, default=5, help="the dynamic trees' depth")
  parser.add_argument("--branching", type=int, default=DynamicTree.branching)
  parser.add_argument("--threshold", type=float, default=AdaptiveDraft.threshold)
  parser.add_argument("--no-adaptive", action="store_true", help="leave adaptive length out")
  parser.add_argument(
    "--weights", default="float32", help="SmolLM2's weights: float32 (default), auto (GGUF)"
  )
  parser.add_argument(
    "--lookup", action="store_true", help="prompt lookup in front of SmolLM2's draft (no --chains)"
  )
  parser.add_argument(
    "--default-chain", action="store_true",
    help="add the default pair's chain (SmolLM2's feature draft behind prompt lookup)",
  )  # fmt: skip
  parser.add_argument("--temperatures", type=float, nargs="+", default=[0.0, 1.0])
  parser.add_argument("--num-prompts", type=int, default=8)
  parser.add_argument(
    "--stride", type=int, default=1, help="every N-th bundled prompt (5: a mix of tasks)"
  )
  parser.add_argument("--max-new-tokens", type=int, default=64)
  parser.add_argument("--repeats", type=int, default=2)
  parser.add_argument("--out", type=pathlib.Path)
  args = parser.parse_args(argv)
  if any(k < 2 or args.gamma % k for k in args.chains):
    parser.error(f"every --chains K must be >= 2 and divide --gamma {args.gamma}")
  if args.out is not None and args.out.exists():
    parser.error(f"{args.out} exists; remove it first")
  try:
    results = run(args)
  except KeyboardInterrupt:
    print("interrupted", file=sys.stderr)
    return 130
  print_table(results)
  if args.out is not None:
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"written: {args.out}", file=sys.stderr)
  return 0


if __name__ == "__main__":
  sys.exit(main())
