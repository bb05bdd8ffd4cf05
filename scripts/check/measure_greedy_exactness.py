"""Greedy speculative vs greedy plain decoding, token for token, per dtype and batch size.

For each pair (the bundled T5 EN->DE and docstring pairs, SmolLM2-135M-Instruct with its
bundled draft) and each dtype (float32, bfloat16, and bfloat16-weights: bfloat16 weight
matrices with float32 arithmetic, `specsample.models.weights`), decodes the same prompts
greedily with `generate` and with `speculative_generate` (batch 1, each prompt alone, and a
batch of `--batch` rows), and counts the prompts whose outputs differ, where the first difference
falls, and whether the plain output itself changed with the batch size. In bfloat16 a
(gamma + 1)-token verify call and a one-token step sum in different orders, so a near-tie
of the two best tokens can flip; this measures how often it does.

  python scripts/check/measure_greedy_exactness.py --out docs/bench/greedy_exactness.json
  python scripts/check/measure_greedy_exactness.py --dtypes bfloat16-weights \
    --pairs ende docstrings --out docs/bench/greedy_exactness_bf16_weights.json
"""

from __future__ import annotations

import argparse
import json
import sys

from compile_paper_programs import parse_args_with_out, write_out  # scripts/check, beside this

from specsample import SamplingConfig, generate, speculative_generate
from specsample.bench.pair import pad_to_width

GREEDY = SamplingConfig(temperature=0.0)


def load(pair: str, dtype: str, num_prompts: int):
  if dtype == "bfloat16-weights":
    from specsample.models.weights import with_weight_dtype

    target, draft, prompts = load(pair, "float32", num_prompts)
    return with_weight_dtype(target, "bfloat16"), with_weight_dtype(draft, "bfloat16"), prompts
  from specsample import bundled
  from specsample.pairs import load_pair

  if pair in bundled.PAIRS:  # ende: English -> German; docstrings: source -> a sentence
    loaded = load_pair(f"bundled:{pair}", dtype=dtype)
    if pair == "ende":
      lines = (bundled.pair_dir(pair) / "test.tsv").read_text().splitlines()
      texts = [line.split("\t")[0] for line in lines if line.strip()][:num_prompts]
    else:
      lines = (bundled.pair_dir(pair) / "test.jsonl").open()
      texts = [json.loads(line)["code"] for line in lines][:num_prompts]
    prompts = [loaded.tokenizer.encode(loaded.prefix + text) for text in texts]
    return loaded.target, loaded.draft, prompts
  loaded = load_pair(dtype=dtype, weights="float32", activations="float32", prompt_lookup=False)
  target, draft, tokenizer = loaded.target, loaded.draft, loaded.tokenizer
  records = [json.loads(line) for line in (bundled.SMOLLM2_DIR / "prompts.jsonl").open()]
  return (
    target,
    draft,
    [
      tokenizer.apply_chat_template([{"role": "user", "content": r["prompt"]}])
      for r in records[:num_prompts]
    ],
  )


def first_difference(a: list[int], b: list[int]) -> int | None:
  for index, (x, y) in enumerate(zip(a, b, strict=False)):
    if x != y:
      return index
  return None if len(a) == len(b) else min(len(a), len(b))


def decode(target, draft, prompts, gamma, max_new_tokens, batch):
  """Plain and speculative greedy outputs, `batch` prompts per call, every call padded to
  the longest prompt (one program per batch size)."""
  width = max(map(len, prompts))
  common = dict(max_new_tokens=max_new_tokens, sampling=GREEDY)
  plain, spec = [], []
  for start in range(0, len(prompts), batch):
    chunk = prompts[start : start + batch]
    chunk += [chunk[-1]] * (batch - len(chunk))  # a full last batch (extra rows dropped)
    array, lengths = pad_to_width(chunk, width)
    keep = min(batch, len(prompts) - start)
    plain += generate(target, array, prompt_lengths=lengths, **common).sequences()[:keep]
    spec += speculative_generate(
      target, draft, array, prompt_lengths=lengths, gamma=gamma, **common
    ).sequences()[:keep]
  return plain, spec


def measure(pair: str, dtype: str, args) -> dict:
  target, draft, prompts = load(pair, dtype, args.num_prompts)
  record = {"pair": pair, "dtype": dtype, "prompts": len(prompts), "gamma": args.gamma}
  plains = {}
  for batch in (1, args.batch):
    plain, spec = decode(target, draft, prompts, args.gamma, args.max_new_tokens, batch)
    plains[batch] = plain
    firsts = [first_difference(p, s) for p, s in zip(plain, spec, strict=True)]
    differing = [f for f in firsts if f is not None]
    record[f"batch_{batch}"] = {
      "differ": len(differing),
      "first_difference_positions": differing,
      "tokens_compared": sum(map(len, plain)),
    }
    print(
      f"{pair:<10} {dtype:<9} batch {batch:>2}: {len(differing)}/{len(prompts)} prompts differ"
      + (f" (first at tokens {differing})" if differing else ""),
      flush=True,
    )
  moved = [first_difference(a, b) for a, b in zip(plains[1], plains[args.batch], strict=True)]
  record["plain_batch_1_vs_batch_n_differ"] = sum(m is not None for m in moved)
  return record


def main(argv=None) -> int:
  # Flags alike in shape to measure_weight_formats.py's: each script reads its own.
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--pairs", nargs="+", default=["ende", "docstrings", "smollm2"])
  parser.add_argument(
    "--dtypes",
    nargs="+",
    choices=["float32", "bfloat16", "bfloat16-weights"],
    default=["float32", "bfloat16", "bfloat16-weights"],
  )
  parser.add_argument("--num-prompts", type=int, default=32)
  parser.add_argument("--max-new-tokens", type=int, default=48)
  parser.add_argument("--gamma", type=int, default=4)
  parser.add_argument("--batch", type=int, default=8)
  args = parse_args_with_out(parser, argv)
  records = []
  try:
    for pair in args.pairs:
      for dtype in args.dtypes:
        records.append(measure(pair, dtype, args))
  except KeyboardInterrupt:
    print("interrupted", file=sys.stderr)
    return 130
  finally:
    if records:
      settings = {"max_new_tokens": args.max_new_tokens, "batch": args.batch}
      write_out(args.out, {"settings": settings, "runs": records})
  return 0


if __name__ == "__main__":
  sys.exit(main())
