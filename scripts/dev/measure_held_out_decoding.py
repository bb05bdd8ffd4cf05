"""The default pair's speculative decoding on held-out chat prompts: ms/token, tokens per
target call, and where an iteration's time goes.

The bundled SmolLM2 pair as `load_pair()` gives it (the GGUF's blocks, 8-bit activations,
the feature draft behind prompt lookup), on --num-prompts held-out chat prompts
(`data.chat_prompts.build_prompts("held_out", ..., seed=11)`: never trained or tuned on),
each alone at batch 1, all padded to one width so that one program serves them:

  decoding  best of 2 timed runs per prompt (compilation excluded), summed: ms per
            generated token (the prompt's prefill included) and mean tokens per target call
  phases    `bench.phase_breakdown` on the first --phase-prompts prompts: the draft phase,
            verify phase and bookkeeping per iteration, and a plain step

To compare two versions of the code, run this file with each checkout's interpreter in
turn (it uses only the public API). `--prompt TEXT` (repeatable) takes these chat
prompts instead of the held-out ones; the phases then also give both decoders' prefill.

  python scripts/dev/measure_held_out_decoding.py [--num-prompts 10] [--gamma 2] [--prompt TEXT]
"""

from __future__ import annotations

import argparse
import sys
import time

import jax
import numpy as np

from specsample import SamplingConfig, speculative_generate
from specsample.bench.pair import pad_to_width
from specsample.bench.phases import phase_breakdown
from specsample.data.chat_prompts import build_prompts
from specsample.pairs import load_pair

PREFILL_AND_TOTALS = ("prefill", "speculative", "target_prefill", "autoregressive")


def main() -> int:
  # Flags alike in shape to measure_gemma_draft_cost.py's: each script reads its own.
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--num-prompts", type=int, default=10)
  parser.add_argument("--phase-prompts", type=int, default=4)
  parser.add_argument("--gamma", type=int, default=2)
  parser.add_argument("--max-new-tokens", type=int, default=96)
  parser.add_argument("--prompt", action="append", default=None, help="a chat prompt of yours")
  args = parser.parse_args()
  pair = load_pair()
  texts = args.prompt or [p.prompt for p in build_prompts("held_out", args.num_prompts, seed=11)]
  chats = [pair.tokenizer.apply_chat_template([{"role": "user", "content": t}]) for t in texts]
  width = max(map(len, chats))
  rows = [pad_to_width([chat], width) for chat in chats]
  seconds = tokens = 0.0
  per_call = []
  for array, lengths in rows:

    def run(array=array, lengths=lengths):
      out = speculative_generate(
        pair.target, pair.draft, array, prompt_lengths=lengths, gamma=args.gamma,
        max_new_tokens=args.max_new_tokens,
      )  # fmt: skip
      jax.block_until_ready(out.tokens)
      return out

    run()  # compiles once, for the first prompt
    best = float("inf")
    for _ in range(2):
      start = time.perf_counter()
      out = run()
      best = min(best, time.perf_counter() - start)
    seconds += best
    tokens += int(out.lengths[0])
    per_call.append(out.stats.tokens_per_target_call)
  print(
    f"{len(rows)} {'' if args.prompt else 'held-out '}prompts padded to {width} tokens, "
    f"gamma {args.gamma}, "
    f"{args.max_new_tokens} new tokens: {1e3 * seconds / tokens:.2f} ms/token, "
    f"{np.mean(per_call):.3f} tokens per target call"
  )
  phases = phase_breakdown(
    pair.target, pair.draft, rows[: args.phase_prompts], gamma=args.gamma,
    sampling=SamplingConfig(0.0), rule="greedy", max_new_tokens=args.max_new_tokens, repeats=3,
  )  # fmt: skip
  step = (phases.autoregressive_calls_seconds - phases.target_prefill_seconds) / phases.tokens
  print(
    f"phases over {min(len(rows), args.phase_prompts)} prompts, ms per iteration: draft "
    f"{1e3 * phases.draft_per_iteration:.2f}, verify {1e3 * phases.verify_per_iteration:.2f}, "
    f"bookkeeping {1e3 * phases.bookkeeping_per_iteration:.2f}; plain step {1e3 * step:.2f} ms; "
    f"draft phase / plain step {phases.draft_per_iteration / step:.2f}"
  )
  ms = {name: 1e3 * getattr(phases, f"{name}_seconds") for name in PREFILL_AND_TOTALS}
  print(
    f"{phases.iterations} iterations, {phases.tokens} tokens; prefill {ms['prefill']:.1f} ms "
    f"speculative ({ms['speculative']:.1f} ms in all), {ms['target_prefill']:.1f} ms plain "
    f"({ms['autoregressive']:.1f} ms in all)"
  )
  return 0


if __name__ == "__main__":
  sys.exit(main())
