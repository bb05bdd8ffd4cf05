"""How long the bundled target's prefill of one chat prompt takes: `init_state` (every prompt
token but the last written to the cache) compiled once, then timed --repeats times; the
median and the fastest, ms. To compare two builds of the kernels, run it with each in turn,
alternated, a few times.

  python scripts/dev/measure_prefill.py [--prompt TEXT] [--repeats 30]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import jax
import jax.numpy as jnp
from measuring import MAIN_JOB  # scripts/dev, beside this script

from specsample.pairs import load_pair


def main() -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--prompt", default=MAIN_JOB)
  parser.add_argument("--repeats", type=int, default=30)
  args = parser.parse_args()
  pair = load_pair()
  chat = pair.tokenizer.apply_chat_template([{"role": "user", "content": args.prompt}])
  prompts, lengths = jnp.asarray([chat], jnp.int32), jnp.asarray([len(chat)], jnp.int32)
  prefill = jax.jit(lambda p, n: pair.target.init_state(p, n, 128))
  jax.block_until_ready(prefill(prompts, lengths))
  seconds = []
  for _ in range(args.repeats):
    start = time.perf_counter()
    jax.block_until_ready(prefill(prompts, lengths))
    seconds.append(time.perf_counter() - start)
  print(
    f"prefill of a {len(chat)}-token prompt: median {1e3 * statistics.median(seconds):.1f} ms, "
    f"fastest {1e3 * min(seconds):.1f} ms ({args.repeats} runs)"
  )
  return 0


if __name__ == "__main__":
  sys.exit(main())
