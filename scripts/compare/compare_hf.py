"""specsample vs Hugging Face transformers (PyTorch, CPU) on IDENTICAL T5 weights.

Four decoders over the same prompts at batch 1, greedy and sampled (temperature 1):
  HF plain       model.generate(...)
  HF assisted    model.generate(..., assistant_model=draft), fixed gamma
                 (num_assistant_tokens=gamma, schedule "constant", no confidence stop)
  ours plain     specsample.generate
  ours spec.     specsample.speculative_generate
Our weights are exported with `save_hf_t5` (float32) and loaded by transformers, so both
frameworks run the same numbers. Each decode is run once untimed (compilation / warm-up),
then timed `--repeats` times; medians are summed over prompts. Greedy outputs are
compared token for token across all four. Batch > 1 (which HF assisted generation does
not support) is timed for ours speculative vs ours and HF plain batch decoding.

  pip install -e ".[hf]"
  python scripts/compare/compare_hf.py                      # the bundled pair, 16 test sentences
  python scripts/compare/compare_hf.py --target T --draft D --vocab spiece.model --input-file X
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import tempfile

import numpy as np

from specsample import SamplingConfig, generate, speculative_generate
from specsample.bench import time_call
from specsample.bench.pair import pad_to_width
from specsample.bench.timing import measured_speedup
from specsample.checkpoints import Vocabulary, save_hf_t5
from specsample.pairs import load_pair


def median_seconds(fn, repeats: int) -> tuple[float, object]:
  """(median seconds, last result) after one untimed warm-up / compiling call."""
  timing, result = time_call(fn, repeats=repeats)
  return timing.median, result


def hf_models(target, draft, directory: pathlib.Path):
  import torch
  from transformers import T5ForConditionalGeneration

  models = []
  for name, model in (("target", target), ("draft", draft)):
    save_hf_t5(model, directory / name, dtype="float32")
    hf = T5ForConditionalGeneration.from_pretrained(directory / name, dtype=torch.float32)
    models.append(hf.eval())
  return models


def hf_generate(model, prompt: list[int], args, *, sample: bool, assistant=None, seed: int = 0):
  import torch

  ids = torch.tensor([prompt])
  kwargs = dict(
    input_ids=ids,
    attention_mask=torch.ones_like(ids),
    max_new_tokens=args.max_new_tokens,
    do_sample=sample,
    num_beams=1,
    top_k=0 if sample else None,
    top_p=1.0 if sample else None,
    temperature=1.0 if sample else None,
  )
  if assistant is not None:
    kwargs["assistant_model"] = assistant
  torch.manual_seed(seed)
  with torch.inference_mode():
    out = model.generate(**kwargs)
  tokens = out[0, 1:].tolist()  # drop the decoder start token
  if model.config.eos_token_id in tokens:
    tokens = tokens[: tokens.index(model.config.eos_token_id) + 1]
  return [t for t in tokens if t != model.config.pad_token_id]


def configure_assistant(assistant, gamma: int) -> None:
  assistant.generation_config.num_assistant_tokens = gamma
  assistant.generation_config.num_assistant_tokens_schedule = "constant"
  assistant.generation_config.assistant_confidence_threshold = 0.0


def decoders(target, draft, hf_target, hf_draft, prompt, array, length, args, sampling, seed):
  """The four decoders of one prompt, as zero-argument calls."""
  sample = sampling.temperature > 0
  common = dict(prompt_lengths=length, max_new_tokens=args.max_new_tokens, sampling=sampling)
  return {
    "hf_plain": lambda: hf_generate(hf_target, prompt, args, sample=sample, seed=seed),
    "hf_assisted": lambda: hf_generate(
      hf_target, prompt, args, sample=sample, assistant=hf_draft, seed=seed
    ),
    "ours_plain": lambda: generate(target, array, seed=seed, **common),
    "ours_speculative": lambda: speculative_generate(
      target, draft, array, gamma=args.gamma, seed=seed, **common
    ),
  }


def run_mode(target, draft, hf_target, hf_draft, prompts, args, temperature: float) -> dict:
  sample = temperature > 0
  sampling = SamplingConfig(temperature=temperature)
  rows = {
    name: {"seconds": 0.0, "tokens": 0, "outputs": []}
    for name in ("hf_plain", "hf_assisted", "ours_plain", "ours_speculative")
  }
  accepted = verified = 0
  for i, prompt in enumerate(prompts):
    array, length = pad_to_width([prompt], max(len(p) for p in prompts))
    runs = decoders(target, draft, hf_target, hf_draft, prompt, array, length, args, sampling, i)
    for name, fn in runs.items():
      seconds, result = median_seconds(fn, args.repeats)
      if name.startswith("ours"):
        if name == "ours_speculative":
          accepted += int(np.sum(result.stats.accepted))
          verified += int(np.sum(result.stats.accepted) + np.sum(result.stats.rejected))
        result = result.sequences()[0]
      rows[name]["seconds"] += seconds
      rows[name]["tokens"] += len(result)
      rows[name]["outputs"].append([int(t) for t in result])
  report = {"temperature": temperature, "alpha": accepted / max(1, verified)}
  for name, row in rows.items():
    report[name] = {
      "seconds": row["seconds"],
      "tokens": row["tokens"],
      "ms_per_token": 1e3 * row["seconds"] / max(1, row["tokens"]),
    }
  if not sample:
    outputs = [rows[name]["outputs"] for name in rows]
    report["greedy_agree"] = sum(
      all(o[k] == outputs[0][k] for o in outputs) for k in range(len(prompts))
    )
  return report


def run_batches(target, draft, hf_target, prompts, args) -> list[dict]:
  import torch

  results = []
  for size in args.batch_sizes:
    chosen = [prompts[i % len(prompts)] for i in range(size)]
    width = max(len(p) for p in chosen)
    array, lengths = pad_to_width(chosen, width)
    common = dict(prompt_lengths=lengths, max_new_tokens=args.max_new_tokens)
    spec, out = median_seconds(
      lambda a=array, c=common: speculative_generate(target, draft, a, gamma=args.gamma, **c),
      args.repeats,
    )
    plain, _ = median_seconds(lambda a=array, c=common: generate(target, a, **c), args.repeats)
    ids = torch.tensor(array.astype(np.int64))
    mask = (torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]).long()

    def hf_batch(ids=ids, mask=mask):
      with torch.inference_mode():
        return hf_target.generate(
          input_ids=ids, attention_mask=mask, max_new_tokens=args.max_new_tokens, do_sample=False
        )

    hf_seconds, _ = median_seconds(hf_batch, args.repeats)
    results.append(
      {
        "batch_size": size,
        "ours_speculative_seconds": spec,
        "ours_plain_seconds": plain,
        "hf_plain_seconds": hf_seconds,
        "tokens": int(np.sum(out.lengths)),
      }
    )
  return results


def markdown(report: dict) -> str:
  lines = [
    f"gamma {report['gamma']}, {report['num_prompts']} prompts at batch 1, up to "
    f"{report['max_new_tokens']} new tokens, medians of {report['repeats']} runs "
    f"(compilation / warm-up excluded), torch {report['torch_threads']} threads.",
    "",
    "| T | decoder | seconds | ms/token | ms/token vs HF plain | ms/token vs HF assisted |",
    "|---|---|---|---|---|---|",
  ]
  for mode in report["modes"]:
    hf_plain, hf_assisted = mode["hf_plain"]["ms_per_token"], mode["hf_assisted"]["ms_per_token"]
    for name in ("hf_plain", "hf_assisted", "ours_plain", "ours_speculative"):
      row = mode[name]
      lines.append(
        f"| {mode['temperature']:g} | {name.replace('_', ' ')} | {row['seconds']:.3f} | "
        f"{row['ms_per_token']:.2f} | {row['ms_per_token'] / hf_plain:.2f} | "
        f"{row['ms_per_token'] / hf_assisted:.2f} |"
      )
    if "greedy_agree" in mode:
      lines.append(
        f"| {mode['temperature']:g} | greedy outputs identical across all four | "
        f"{mode['greedy_agree']}/{report['num_prompts']} prompts | | | |"
      )
  lines += [
    "",
    "| batch | ours speculative s | ours plain s | HF plain s | speculative vs ours plain |",
    "|---|---|---|---|---|",
  ]
  for b in report["batches"]:  # greedy: both decoders generate the same tokens
    speedup = measured_speedup(
      b["ours_plain_seconds"], b["tokens"], b["ours_speculative_seconds"], b["tokens"]
    )
    lines.append(
      f"| {b['batch_size']} | {b['ours_speculative_seconds']:.3f} | "
      f"{b['ours_plain_seconds']:.3f} | {b['hf_plain_seconds']:.3f} | "
      f"{speedup:.2f}x |"
    )
  return "\n".join(lines) + "\n"


def main() -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--target", help="our T5 checkpoint (default: the bundled pair)")
  parser.add_argument("--draft")
  parser.add_argument("--vocab")
  parser.add_argument("--prefix", default=None)
  parser.add_argument("--input-file", help="one input per line (TSV: first column)")
  parser.add_argument("--num-prompts", type=int, default=16)
  parser.add_argument("--gamma", type=int, default=None, help="default: the pair's recommended")
  parser.add_argument("--max-new-tokens", type=int, default=48)
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 4, 8, 16])
  parser.add_argument("--out", default="bench_out/compare_hf", help="directory for JSON + md")
  args = parser.parse_args()

  import torch

  if args.target is None:
    from specsample.bundled import pair_dir

    pair = load_pair("bundled:ende")
    target, draft, vocab = pair.target, pair.draft, pair.tokenizer
    prefix = pair.prefix if args.prefix is None else args.prefix
    input_file = args.input_file or pair_dir("ende") / "test.tsv"
    args.gamma = args.gamma or pair.gamma
  else:
    if not (args.draft and args.input_file):
      parser.error("--target needs --draft and --input-file")
    pair = load_pair(
      args.target, args.draft, weights="float32", prompt_lookup=False, with_tokenizer=False
    )
    target, draft = pair.target, pair.draft
    vocab = Vocabulary(args.vocab or args.target)
    prefix, input_file = args.prefix or "", args.input_file
    args.gamma = args.gamma or 4
  lines = pathlib.Path(input_file).read_text(encoding="utf-8").splitlines()
  texts = [line.split("\t")[0] for line in lines if line.strip()][: args.num_prompts]
  prompts = [vocab.encode(prefix + text) for text in texts]

  exported = tempfile.TemporaryDirectory()  # kept until exit: the weights may be mapped
  hf_target, hf_draft = hf_models(target, draft, pathlib.Path(exported.name))
  configure_assistant(hf_draft, args.gamma)
  modes = []
  for temperature in (0.0, 1.0):
    print(f"batch 1, temperature {temperature:g} ...", file=sys.stderr, flush=True)
    modes.append(run_mode(target, draft, hf_target, hf_draft, prompts, args, temperature))
  print("batch sizes ...", file=sys.stderr, flush=True)
  report = {
    "gamma": args.gamma,
    "num_prompts": len(prompts),
    "max_new_tokens": args.max_new_tokens,
    "repeats": args.repeats,
    "torch_threads": torch.get_num_threads(),
    "modes": modes,
    "batches": run_batches(target, draft, hf_target, prompts, args),
  }
  out = pathlib.Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  (out / "compare_hf.json").write_text(json.dumps(report, indent=2) + "\n")
  (out / "compare_hf.md").write_text(markdown(report))
  print(markdown(report))
  return 0


if __name__ == "__main__":
  sys.exit(main())
