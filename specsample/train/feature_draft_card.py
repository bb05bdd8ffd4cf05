"""The metrics and model card of the bundled feature-level SmolLM2 draft (the card stage of
specsample.train.feature_draft_recipe): the two bench reports, alpha by task measured on
the bench prompts (~4 min), and the training logs of the work directory (or, where it is
gone, the training facts metrics.json already holds), as bundle/feature_draft/metrics.json
and MODEL_CARD.md (its words: feature_draft_card_text)."""

from __future__ import annotations

import os

import numpy as np

from specsample.core.sampling import SamplingConfig
from specsample.data import chat_prompts
from specsample.files import write_json, write_text
from specsample.train.feature_draft_card_text import card_text
from specsample.train.feature_draft_options import (
  FeatureDraftOptions,
  load_sequences,
  store_paths,
)
from specsample.train.pipeline_data import (
  StageError,
  best_point,
  encode,
  log,
  measured,
  read_bench_reports,
  read_json,
)
from specsample.train.target_responses import right_pad


def stage_summary(train_log: dict) -> dict:
  """A training run's last step and loss, and its settings the card quotes."""
  history = train_log.get("history") or [[0, None]]
  settings = train_log.get("settings", {})
  return {"steps": history[-1][0], "final_loss": history[-1][1],
          **{k: settings.get(k) for k in ("tokens_per_batch", "learning_rate", "cls_weight",
                                          "noise", "prompt_weight", "steps_ahead",
                                          "max_new_tokens")}}  # fmt: skip


def alpha_by_task(target, draft, tokenizer, path: str, gamma: int, max_new_tokens: int) -> dict:
  """Alpha and target tokens per call of the draft alone, by task of the bench prompts at
  `path`, greedy and temperature 1, one prompt at a time (batch 1, gamma fixed).
  -> {"t0", "t1": {task, "all": {"alpha", "tokens_per_target_call", "prompts"}}}."""
  from specsample.decoding import SpeculativeSettings, speculative_decode

  counts: dict = {}
  prompts = chat_prompts.read_jsonl(path)
  ids = [encode(tokenizer, p.prompt) for p in prompts]
  width = max(len(x) for x in ids)  # one width: one compiled program for every prompt
  for temperature in (0.0, 1.0):
    for i, prompt in enumerate(prompts):
      array, length = right_pad([ids[i]], width, 0), np.array([len(ids[i])], np.int32)
      settings = SpeculativeSettings.of(
        gamma=gamma, max_new_tokens=max_new_tokens, sampling=SamplingConfig(temperature=temperature)
      )
      out = speculative_decode(target, draft, array, settings, seed=i, prompt_lengths=length)
      for task in (prompt.task, "all"):
        c = counts.setdefault(f"t{temperature:g}", {}).setdefault(task, [0, 0, 0, 0])
        c[0] += int(np.sum(out.stats.accepted))
        c[1] += int(np.sum(out.stats.rejected))
        c[2] += int(np.sum(out.stats.iterations))
        c[3] += 1
  return {
    t: {task: {"alpha": a / max(1, a + r), "tokens_per_target_call": (a + n) / max(1, n),
               "prompts": k} for task, (a, r, n, k) in by_task.items()}
    for t, by_task in counts.items()
  }  # fmt: skip


def kept_token_coverage(options: FeatureDraftOptions, output_ids: np.ndarray, tokenizer) -> float:
  """The share of the validation response tokens among `output_ids`."""
  _, validation = load_sequences(options, tokenizer)
  held = np.concatenate([s.tokens[s.prompt_length :] for s in validation] or [[0]])
  return float(np.isin(held, output_ids).mean())


def training_facts(
  options: FeatureDraftOptions,
  directory: str,
  output_ids: np.ndarray | None = None,
  tokenizer=None,
) -> dict:
  """data / training / validation_agreement from the work directory's logs, or, where
  they are gone, as the draft's metrics.json recorded them (the card is rewritten from
  new bench reports without retraining). output_ids: the draft's kept tokens; where they
  are not the vocabulary stage's (a draft continued from another keeps that one's), the
  share of validation response tokens they cover joins the data (`tokenizer`: the
  target's, where the validation sequences come from the response store)."""
  log_path = os.path.join(options.work, "train_log.json")
  if not os.path.exists(log_path):
    kept = read_json(os.path.join(directory, "metrics.json"))
    if "training" not in kept:
      raise StageError(f"card: no training log ({log_path}) and no training facts in "
                       f"{directory}/metrics.json: run the train stage first")  # fmt: skip
    log(f"card: no {log_path}; training facts kept from {directory}/metrics.json")
    keys = ("data", "training", "validation_agreement", "validation_overall",
            "validation_baseline")  # fmt: skip
    facts = {k: kept[k] for k in keys if k in kept}
    if options.card_note:
      facts["training"] = {**facts["training"], "note": options.card_note}
    return facts
  train_log = read_json(log_path)
  previous = read_json(options.previous_log) if options.previous_log else {}
  vocab = read_json(os.path.join(options.work, "vocab.json"))
  generation = read_json(os.path.join(options.work, "generation.json")) or store_facts(options)
  validation = read_json(os.path.join(options.work, "validation.json"))
  continued = {}  # the draft keeps tokens other than the vocabulary stage's
  if output_ids is not None and set(vocab.get("ids", [])) != set(output_ids.tolist()):
    continued = {"kept_token_coverage": kept_token_coverage(options, output_ids, tokenizer)}
  return {
    "data": {"sequences": train_log.get("sequences"), "positions": train_log.get("positions"),
             "response_tokens": train_log.get("response_tokens"),
             "output_vocab_coverage": vocab.get("coverage"), **continued, **generation},
    "training": {"minutes": round(train_log.get("minutes", 0.0), 1),
                 "stages": [stage_summary(run) for run in (previous, train_log) if run],
                 "commands": [run["command"] for run in (previous, train_log)
                              if run.get("command")],
                 "init_from": (train_log.get("settings") or {}).get("init_from"),
                 **({"note": options.card_note} if options.card_note else {})},
    "validation_agreement": validation,
    **validation_sets(options.work, validation),
  }  # fmt: skip


def store_facts(options: FeatureDraftOptions) -> dict:
  """What the card says of a response store's data (live features), {} for shards."""
  if options.features != "live":
    return {}
  from specsample.train.response_store import ResponseStore

  stores = [ResponseStore(path) for path in store_paths(options)]
  summaries = [store.summary() for store in stores]
  return {"store": options.store,
          "store_responses": sum(s["responses"] for s in summaries),
          "generation_minutes": round(sum(s["seconds"] for s in summaries) / 60, 1),
          "turn_prompts": sum(p.source.startswith("turn:") for store in stores
                              for p in store.prompts())}  # fmt: skip


def validation_sets(work: str, validation: dict) -> dict:
  """The validate stage's agreement of the whole held-out set beyond `validation` (the
  work directory's validation.json), where it ran:
  {"validation_overall": {set: {"draft", "baseline"}: by_step}, "baseline": path}."""
  sampled = validation.get("all")
  baseline = read_json(os.path.join(work, "validation_baseline.json"))
  greedy = read_json(os.path.join(work, "validation_greedy.json"))
  train = read_json(os.path.join(work, "validation_train.json"))
  if not (sampled and baseline and greedy and train):
    return {}
  scores = greedy["scores"]
  return {"validation_overall": {
    "held-out responses (sampled)": {"draft": sampled["by_step"],
                                     "baseline": baseline["scores"]["all"]["by_step"]},
    "the target's greedy responses to the held-out prompts": {
      "draft": scores["draft"]["all"]["by_step"], "baseline": scores["baseline"]["all"]["by_step"]},
    "sampled training responses": {"draft": train["scores"]["all"]["by_step"]},
  }, "validation_baseline": baseline["draft"]}  # fmt: skip


def stored_parameter_count(directory: str) -> int:
  """The trained parameters a feature draft's directory stores (all but `output_ids`),
  counted as the float arrays they are (a draft loaded for 8-bit activations holds Q4_0
  blocks, whose bytes are not its parameters)."""
  from safetensors import safe_open

  with safe_open(os.path.join(directory, "model.safetensors"), "np") as stored:
    names = [name for name in stored.keys() if name != "output_ids"]  # noqa: SIM118
    return sum(int(np.prod(stored.get_slice(name).get_shape())) for name in names)


def write_metrics(options: FeatureDraftOptions, draft, target, tokenizer) -> dict:
  """bundle/feature_draft/metrics.json: the two bench reports (`bench_reports`), alpha by
  task on `bench_prompts` and the training facts. -> the metrics."""
  with_lookup, alone = read_bench_reports(options.bench_reports)
  directory = os.path.join(options.bundle, "feature_draft")
  facts = training_facts(options, directory, np.asarray(draft.params["output_ids"]), tokenizer)
  gamma = best_point(alone, 0.0)["gamma"]
  log(f"card: alpha by task (gamma {gamma}, {options.bench_prompts})")
  by_task = alpha_by_task(target, draft, tokenizer, options.bench_prompts, gamma,
                          alone["settings"]["max_new_tokens"])  # fmt: skip
  metrics = {
    "recommended_gamma": gamma,
    "recommended_gamma_with_lookup": best_point(with_lookup, 0.0)["gamma"],
    "c": alone["costs"]["c"], "c_with_lookup": with_lookup["costs"]["c"],
    "r": alone["costs"]["r"],
    "target_step_ms": 1e3 * alone["costs"]["target_seconds"]["1"],
    "draft_step_ms": 1e3 * alone["costs"]["draft_seconds"],
    "analytic_alpha_first_proposal": alone.get("analytic_alpha"),
    "machine": alone.get("machine"),
    "bench": {"with_lookup": measured(with_lookup), "draft_alone": measured(alone),
              "prompts": alone["num_prompts"],
              "max_new_tokens": alone["settings"]["max_new_tokens"],
              "reports": options.bench_reports.split(",")},
    "alpha_by_task": {"gamma": gamma, **by_task},
    "draft": {"num_layers": draft.config.num_layers, "d_model": draft.config.d_model,
              "feature_layers": list(draft.config.feature_layers),
              "output_vocab_size": draft.config.output_vocab_size,
              "trainable_parameters": stored_parameter_count(directory),
              "file_mb": round(os.path.getsize(os.path.join(directory, "model.safetensors"))
                               / 2**20, 1)},
    **facts,
  }  # fmt: skip
  write_json(os.path.join(directory, "metrics.json"), metrics, indent=2)
  log(f"metrics -> {os.path.join(directory, 'metrics.json')}")
  return metrics


def write_card(options: FeatureDraftOptions, metrics: dict) -> None:
  """bundle/feature_draft/MODEL_CARD.md."""
  write_text(os.path.join(options.bundle, "feature_draft", "MODEL_CARD.md"), card_text(metrics))
