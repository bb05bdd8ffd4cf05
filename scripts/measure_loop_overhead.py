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
forward passes. Medians of several runs, compilation excluded.

  python scripts/measure_loop_overhead.py [--vocab 8 1024 8192] [--batch 1 8]
"""

from __future__ import annotations

import argparse
import functools

import jax
import jax.numpy as jnp

from specsample import SamplingConfig, generate, speculative_generate
from specsample.bench import time_call
from specsample.models import MarkovLM


def read_all(logits: jax.Array) -> jax.Array:
  """A next token (0 or 1) that depends on every logit, so none can be skipped.

  [batch, ..., vocab] -> int32[batch]. One pass over the logits: the least any decoder
  must spend on them.
  """
  return (jnp.sum(logits.reshape(logits.shape[0], -1), axis=-1) > 0).astype(jnp.int32)


@functools.partial(jax.jit, static_argnames=("gamma", "iterations", "positions"))
def model_calls_only(model, prompts, lengths, *, gamma: int, iterations: int, positions: int):
  """The speculative loop's model calls and nothing else (tokens chained cheaply)."""
  target_state, pending = model.init_state(prompts, lengths, positions)
  draft_state, _ = model.init_state(prompts, lengths, positions)
  batch = prompts.shape[0]
  all_rows = jnp.ones((batch,), jnp.int32)

  def iteration(_, carry):
    target_state, draft_state, token = carry
    target_end, draft_end = target_state.end_index, draft_state.end_index
    logits, draft_state = model.extend(draft_state, jnp.stack([token, token], 1), all_rows)
    drafted = [read_all(logits[:, 1])]
    for _ in range(gamma - 1):
      logits, draft_state = model.extend(draft_state, drafted[-1][:, None], all_rows)
      drafted.append(read_all(logits[:, 0]))
    block = jnp.stack([token, *drafted], axis=1)  # [batch, gamma + 1]
    logits, target_state = model.extend(target_state, block, all_rows * (gamma + 1))
    token = read_all(logits)
    return model.rewind(target_state, target_end), model.rewind(draft_state, draft_end), token

  return jax.lax.fori_loop(0, iterations, iteration, (target_state, draft_state, pending))[2]


@functools.partial(jax.jit, static_argnames=("steps", "positions"))
def ar_model_calls_only(model, prompts, lengths, *, steps: int, positions: int):
  state, pending = model.init_state(prompts, lengths, positions)
  all_rows = jnp.ones((prompts.shape[0],), jnp.int32)

  def step(_, carry):
    state, token = carry
    end = state.end_index
    logits, state = model.extend(state, token[:, None], all_rows)
    return model.rewind(state, end), read_all(logits)

  return jax.lax.fori_loop(0, steps, step, (state, pending))[1]


def measure(
  vocab: int, batch: int, sampling: SamplingConfig, gamma: int, tokens: int, repeats: int
):
  model = MarkovLM.random(0, vocab, max_length=tokens + 64)
  prompts = jnp.ones((batch, 1), jnp.int32)
  lengths = jnp.ones((batch,), jnp.int32)
  prompt_list = [[1]] * batch
  spec_time, out = time_call(
    lambda: speculative_generate(
      model, model, prompt_list, gamma=gamma, max_new_tokens=tokens, sampling=sampling
    ),
    repeats=repeats,
  )
  iterations = int(out.stats.target_calls)
  calls_time, _ = time_call(
    lambda: model_calls_only(
      model, prompts, lengths, gamma=gamma, iterations=iterations, positions=tokens + gamma + 1
    ),
    repeats=repeats,
  )
  ar_time, ar_out = time_call(
    lambda: generate(model, prompt_list, max_new_tokens=tokens, sampling=sampling),
    repeats=repeats,
  )
  steps = int(ar_out.stats.target_calls)
  ar_calls_time, _ = time_call(
    lambda: ar_model_calls_only(model, prompts, lengths, steps=steps, positions=tokens),
    repeats=repeats,
  )
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
