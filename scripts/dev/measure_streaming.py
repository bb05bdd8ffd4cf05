"""What streaming costs: the README's main job at batch 1 with streaming off and on.

Decodes the README's prompt with SmolLM2-135M-Instruct and its bundled draft (greedy,
the pair's gamma, 64 new tokens, as `specsample generate`), speculatively and plainly,
each in three ways: without streaming; streaming with the tokens dropped (the program's
cost: on CPU one push into the native token queue per iteration, elsewhere one ordered
host callback); and streaming into the command line's printer (`StreamedText`: the
queue's reader thread hands the tokens over, the row is decoded and the new text written,
here to /dev/null).
Compilation is excluded; the rounds run every variant once in turn, so a slow spell of a
shared machine lands on all of them; the cost is the median of each round's ratio to the
variant without streaming (and the ratio of the fastest runs, next to it).

  python scripts/dev/measure_streaming.py --repeats 15 [--callback]

--callback: the host callback that accelerators and installs without the kernels take,
in place of the native token queue (to compare the two ways on one machine).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics

from measuring import MAIN_JOB  # scripts/dev, beside this script

from specsample import SpeculativeSettings, generate
from specsample.bench import time_calls
from specsample.cli.generate import StreamedText
from specsample.core import SamplingConfig
from specsample.decoding import speculative_decode
from specsample.kernels import token_queue
from specsample.pairs import load_pair

PROMPT = MAIN_JOB


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--repeats", type=int, default=15)
  parser.add_argument("--max-new-tokens", type=int, default=64)
  parser.add_argument("--callback", action="store_true", help="the host callback, not the queue")
  args = parser.parse_args()
  if args.callback:
    token_queue.available = lambda: False  # read when a program is traced and run
  way = "host callback" if args.callback else "native queue"
  print(f"streaming through the {way}" if token_queue.available() or args.callback else
        "the native queue is not built here: streaming through the host callback")  # fmt: skip

  pair = load_pair()
  prompts = [pair.tokenizer.apply_chat_template([{"role": "user", "content": PROMPT}])]
  settings = SpeculativeSettings(
    gamma=pair.gamma, max_new_tokens=args.max_new_tokens, sampling=SamplingConfig(0.0)
  )
  streaming = dataclasses.replace(settings, stream=True)
  devnull = open(os.devnull, "w")  # noqa: SIM115 (open for the whole run)

  def printer():
    return StreamedText(pair.tokenizer, devnull)

  def speculative(settings, sink=None):
    return lambda: speculative_decode(
      pair.target, pair.draft, prompts, settings, on_tokens=sink() if sink else None
    )

  def plain(sink=None):
    return lambda: generate(
      pair.target, prompts, max_new_tokens=args.max_new_tokens, sampling=settings.sampling,
      on_tokens=sink() if sink else None,
    )  # fmt: skip

  def drop():
    return lambda row, tokens: None

  variants = {
    "speculative, off": speculative(settings),
    "speculative, tokens dropped": speculative(streaming),
    "speculative, printed": speculative(streaming, printer),
    "plain, off": plain(),
    "plain, tokens dropped": plain(drop),
    "plain, printed": plain(printer),
  }
  timings, outputs = time_calls(list(variants.values()), repeats=args.repeats)
  sequences = [out.sequences() for out in outputs]
  assert all(s == sequences[0] for s in sequences), "streaming changed the output"
  tokens = len(sequences[0][0])
  print(f"gamma {pair.gamma}, {tokens} tokens, {args.repeats} rounds (medians)")
  for index, (name, timing) in enumerate(zip(variants, timings, strict=True)):
    base = timings[0 if name.startswith("speculative") else 3]
    ratios = [run / ref for run, ref in zip(timing.seconds, base.seconds, strict=True)]
    cost = 100 * (statistics.median(ratios) - 1)
    fastest = 100 * (min(timing.seconds) / min(base.seconds) - 1)
    line = f"{name:28s} {1e3 * timing.median / tokens:5.2f} ms/token"
    line += f" (fastest {1e3 * min(timing.seconds) / tokens:5.2f})"
    if index not in (0, 3):
      line += f"  {cost:+5.1f}% (fastest runs {fastest:+5.1f}%)"
    print(line)
  print("(+x%: the median of the rounds' ratios to the same decode without streaming)")


if __name__ == "__main__":
  main()
