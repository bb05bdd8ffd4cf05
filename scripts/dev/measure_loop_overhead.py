"""What the decoding loops cost per iteration beyond the models' forward passes.

With MarkovLM (a table lookup per position) as both draft and target, a speculative
iteration's time is almost all loop machinery: logits processing over the vocabulary,
sampling, verification, commits, rewinds and the while-loop itself. This script times,
side by side in one run:

  spec      speculative_generate, draft == target (every block accepted), per iteration
  calls     a loop making only the same model calls (gamma draft extends incl. the
            2-token catch-up, one (gamma+1)-token target extend, two rewinds) and
            reading every logit once, per iteration
  ar        generate, per token;  ar-calls: only its model calls, per token

overhead = spec - calls (and ar - ar-calls): the cost a real model pair pays on top of its
forward passes. The model-calls-only loops are specsample.bench.phases' (the ones
`specsample bench` uses). Medians of runs timed side by side, compilation excluded.

  python scripts/dev/measure_loop_overhead.py [--vocab 8 1024 8192] [--batch 1 8]
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp

from specsample import SamplingConfig, generate, speculative_generate
from specsample.bench import time_calls
from specsample.bench.phases import autoregressive_model_calls, speculative_model_calls
from specsample.models import MarkovLM


def measure(
  vocab: int, batch: int, sampling: SamplingConfig, gamma: int, tokens: int, repeats: int
):
  model = MarkovLM.random(0, vocab, max_length=tokens + 64)
  prompts = jnp.ones((batch, 1), jnp.int32)
  lengths = jnp.ones((batch,), jnp.int32)
  prompt_list = [[1]] * batch
  out = speculative_generate(
    model, model, prompt_list, gamma=gamma, max_new_tokens=tokens, sampling=sampling
  )
  iterations = int(out.stats.target_calls)  # every block accepted: 2-token catch-ups
  steps = int(
    generate(model, prompt_list, max_new_tokens=tokens, sampling=sampling).stats.target_calls
  )
  positions = tokens + gamma + 1
  calls = [
    lambda: speculative_generate(
      model, model, prompt_list, gamma=gamma, max_new_tokens=tokens, sampling=sampling
    ).tokens,
    lambda: speculative_model_calls(
      model, model, prompts, lengths, iterations, iterations, gamma=gamma,
      positions=positions, with_draft=True,
    ),
    lambda: generate(model, prompt_list, max_new_tokens=tokens, sampling=sampling).tokens,
    lambda: autoregressive_model_calls(model, prompts, lengths, steps, positions=tokens),
  ]  # fmt: skip
  spec_time, calls_time, ar_time, ar_calls_time = time_calls(calls, repeats=repeats)[0]
  us = 1e6
  return {
    "spec": spec_time.median / iterations * us,
    "calls": calls_time.median / iterations * us,
    "ar": ar_time.median / steps * us,
    "ar_calls": ar_calls_time.median / steps * us,
    "iterations": iterations,
  }


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--vocab", type=int, nargs="+", default=[8, 1024, 8192])
  parser.add_argument("--batch", type=int, nargs="+", default=[1, 8])
  parser.add_argument("--gamma", type=int, default=4)
  parser.add_argument("--tokens", type=int, default=400)
  parser.add_argument("--repeats", type=int, default=5)
  args = parser.parse_args()
  settings = {
    "greedy": SamplingConfig(temperature=0.0),
    "T=1": SamplingConfig(temperature=1.0),
    "T=1,top-p=0.9": SamplingConfig(temperature=1.0, top_p=0.9),
  }
  print(
    f"jax {jax.__version__} on {jax.devices()[0].platform}; gamma = {args.gamma}; "
    f"{args.tokens} tokens per row; microseconds, medians of {args.repeats} runs"
  )
  header = (
    "| vocab | batch | sampling | spec/iter | calls/iter | overhead/iter "
    "| ar/token | ar calls/token | ar overhead/token |"
  )
  print(header)
  print("|---" * (header.count("|") - 1) + "|")
  for vocab in args.vocab:
    for batch in args.batch:
      for name, sampling in settings.items():
        r = measure(vocab, batch, sampling, args.gamma, args.tokens, args.repeats)
        print(
          f"| {vocab} | {batch} | {name} | {r['spec']:.0f} | {r['calls']:.0f} | "
          f"{r['spec'] - r['calls']:.0f} | {r['ar']:.0f} | {r['ar_calls']:.0f} | "
          f"{r['ar'] - r['ar_calls']:.0f} |",
          flush=True,
        )


if __name__ == "__main__":
  main()
