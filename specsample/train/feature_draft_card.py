"""The metrics and model card of the bundled feature-level SmolLM2 draft (the card stage of
specsample.train.feature_draft_recipe): the two bench reports, alpha by task measured on
the bench prompts (~4 min), and the training logs of the work directory (or, where it is
gone, the training facts metrics.json already holds), as bundle/feature_draft/metrics.json
and MODEL_CARD.md."""

from __future__ import annotations

import os

import numpy as np

from specsample.core.sampling import SamplingConfig
from specsample.data import chat_prompts
from specsample.files import write_json, write_text
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
  speedup_row,
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


# How the first bundled feature draft was made (its training logs recorded no command).
FIRST_DRAFT_COMMANDS = """Commands: `python scripts/train/train_smollm2_feature_draft.py --work
  out/smollm2_feature_draft --target-activations float32 --stages
  prompts,generate,vocab,train,export --generate-minutes 70 --train-steps 800
  --train-minutes 40 --learning-rate 2e-3 --cls-weight 1.0`, then (the second stage, from
  the first's draft copied to out/stage1_draft, in a work directory with the same shards,
  vocab.json and generation.json) `--stages train,export --init-from out/stage1_draft
  --steps-ahead 3 --train-steps 250 --train-minutes 25 --learning-rate 1e-3 --cls-weight
  1.0`, then the bench commands of docs/smollm2.md and `--stages card --previous-log
  ...`."""


def commands_text(training: dict, data: dict) -> str:
  """The card's commands: those the training logs recorded, else the first draft's."""
  commands = training.get("commands")
  if not commands:
    return FIRST_DRAFT_COMMANDS
  start = training.get("init_from")
  text = "Commands: " + ", then ".join(f"`{c}`" for c in commands)
  if data.get("store"):
    stores = ", ".join(f"`{path}`" for path in data["store"].split(","))
    text += f" (on the responses `scripts/train/generate_on_policy.py` stored in {stores})"
  else:
    text += " (on shards generated by the same command with `--stages prompts,generate,vocab`)"
  if start:
    text += f", starting from the draft in `{start}`"
  return text + "; then the bench commands of docs/smollm2.md and `--stages card`."


def fusion_text(draft: dict) -> str:
  """The card's words for the target layers a draft fuses (EAGLE-3), before its layer."""
  layers = draft.get("feature_layers") or []
  if not layers:
    return ""
  width = draft["d_model"] * (len(layers) + 1)
  names = ", ".join(str(i) for i in layers)
  return (f"the target's feature: the outputs of its layers {names} (RMS-normalised) and "
          f"its final state -> linear {width} -> {draft['d_model']} (inside a drafted block: "
          "the draft's own output); ")  # fmt: skip


def card_text(metrics: dict) -> str:
  """MODEL_CARD.md of the feature draft, from `write_metrics`' metrics."""
  m, d, data, t = metrics, metrics["draft"], metrics["data"], metrics["training"]
  bench, validation = m["bench"], m["validation_agreement"]
  rows = "\n".join(
    f"| {task} | {' | '.join(f'{x:.2f}' for x in v['by_step'])} | {v.get('tokens') or 'n/a'} |"
    for task, v in sorted(validation.items(), key=lambda kv: kv[0] == "all")
  )
  by_task = m["alpha_by_task"]
  task_rows = "\n".join(
    f"| {task} | {by_task['t0'][task]['prompts']} | {by_task['t0'][task]['alpha']:.2f} | "
    f"{by_task['t0'][task]['tokens_per_target_call']:.2f} | {by_task['t1'][task]['alpha']:.2f} | "
    f"{by_task['t1'][task]['tokens_per_target_call']:.2f} |"
    for task in sorted(by_task["t0"], key=lambda k: (k == "all", k))
  )
  stages = t["stages"]
  first = stages[0]
  training = "; ".join(
    f"{s['steps']} steps at learning rate {s['learning_rate']}, {s['steps_ahead'] or 1} "
    f"drafting step(s) simulated"
    + (f" (final loss {s['final_loss']:.3f})" if s.get("final_loss") is not None else "")
    for s in stages
  )
  coverage = ", ".join(
    f"{k}: {v:.1%}" for k, v in (data.get("output_vocab_coverage") or {}).items()
  )
  if data.get("kept_token_coverage") is not None:
    share = data["kept_token_coverage"]
    coverage += (f" (chosen from this data; the draft keeps the {d['output_vocab_size']} "
                 f"tokens of the draft it continues, which cover {share:.1%})")  # fmt: skip
  record = f"\n\n{t['note']}" if t.get("note") else ""
  prompts_text, data_text = data_texts(data, first)
  overall = overall_text(m)
  machine = m.get("machine") or {}
  machine_text = f"{machine.get('cpu')}, {machine.get('cpu_cores')} cores, jax {machine.get('jax')}"

  settings = first
  commands = commands_text(t, data)
  role = "The default draft of `specsample generate` (`--draft bundled:feature`)"
  if m.get("superseded_by"):  # a previous draft kept selectable
    role = (f"The previous default draft of `specsample generate`, kept selectable (`--draft "
            f"{m['selected_as']}`; the default `{m['superseded_by']}` continues its training "
            "on more data)")  # fmt: skip
  return f"""# Bundled feature draft for SmolLM2-135M-Instruct

{role}: a feature-level
draft (Li et al. 2024, "EAGLE") trained on this machine (2 CPU cores, shared) from the
target's own responses and features. It reads the target's features (its final-normed
hidden states) of the committed text, which the target's verify call computes anyway, and
predicts the next feature with one decoder layer; the target's own output rows turn it
into logits. `specsample generate` puts prompt lookup in front of it; `--no-prompt-lookup`
uses it alone. Greedy speculative output equals the target's own greedy output token for
token; at temperature 1 the output is distributed exactly as the target's.

| | draft |
|---|---|
| architecture | {fusion_text(d)}concat(token embedding, target feature before it) -> linear {2 * d["d_model"]} -> {d["d_model"]} -> {d["num_layers"]} decoder layer of the target's shape (9 heads / 3 KV heads, MLP 1536) -> the target's output rows of {d["output_vocab_size"]} kept tokens |
| shared with the target (not stored) | its input embedding and its output rows (the tied embedding) |
| output vocabulary | the {d["output_vocab_size"]} most frequent response tokens (+ special tokens); every other token gets probability 0, which verification keeps exact |
| trainable parameters | {d["trainable_parameters"]:,} ({d["file_mb"]} MB float16) |
| c (draft step / target step, batch 1) | {m["c"]:.3f} ({m["draft_step_ms"]:.1f} ms / {m["target_step_ms"]:.1f} ms); behind prompt lookup {m["c_with_lookup"]:.3f} |
| r(gamma+1) (target verify / one step) | {", ".join(f"{g}: {x:.2f}" for g, x in m["r"].items())} |

## Measured speedups over the target alone

`specsample bench` on the bundled prompts (`../prompts.jsonl`, {bench["prompts"]} prompts of
mixed tasks from held-out sources, up to {bench["max_new_tokens"]} new tokens, wall clock,
compilation excluded, each speculative run timed side by side with the autoregressive one),
at the measured best gamma; reports: {", ".join(bench["reports"])}; machine: {machine_text}.

| draft | batch 1, greedy | batch 1, temperature 1 | greedy, by batch size |
|---|---|---|---|
{speedup_row("behind prompt lookup (default)", bench["with_lookup"])}
{speedup_row("alone", bench["draft_alone"])}

Alpha (accepted / proposed up to the first rejection) and target tokens per call of the
draft alone, by task, gamma {by_task["gamma"]}, batch 1, the same prompts and token limit
(`--stages card` measures it):

| task | prompts | alpha, greedy | tokens/call, greedy | alpha, T=1 | tokens/call, T=1 |
|---|---|---|---|---|---|
{task_rows}

Greedy agreement with the target on held-out responses (every 20th train prompt), by task
and drafting step: step 1 reads the target's features, steps 2 and 3 the draft's own
predictions (teacher-forced tokens; with the cache of a real drafted block):

| task | step 1 | step 2 | step 3 | tokens |
|---|---|---|---|---|
{rows}
{overall}
## Data and training

{prompts_text}
{data_text}
- Output vocabulary coverage of validation response tokens by size: {coverage}.
- Loss per position: smooth-L1 between the predicted and the target's feature + {settings["cls_weight"]}
  x cross-entropy from the target's next-token distribution over the kept tokens (both
  through the same frozen output rows); weight 1 at response positions, {settings["prompt_weight"]}
  at prompt positions; uniform noise of +-{settings["noise"]} on the input features.
  AdamW, warmup + cosine, {settings["tokens_per_batch"]} positions per batch, in
  {len(stages)} stage(s), {t["minutes"]} min in all: {training}. Simulated drafting steps
  (training-time test, as EAGLE-3) read the draft's own predictions with the cache of a
  real drafted block: without them the draft's second proposal was accepted far less often
  than its first.
- {commands} Generation and training are capped by wall-clock minutes, so a rerun on
  another machine ends with a different amount of data and steps.{record}

## Limitations

- Trained on what two CPU cores make in a few hours; the agreement grows with data and
  steps (see docs/smollm2.md).
- A feature draft needs its target's features: it works only with SmolLM2-135M-Instruct
  (or a model with the same embedding and hidden states), drafts one fixed-length chain
  (no adaptive lengths or trees), and is not a Hugging Face model.
- Tokens outside the {d["output_vocab_size"]} kept ones are never proposed.
"""  # noqa: E501


def data_texts(data: dict, settings: dict) -> tuple[str, str]:
  """The card's Prompts and Data bullets: of a response store (live features) or of a work
  directory's shards."""
  if data.get("store"):
    stores = ", ".join(f"`{path}`" for path in data["store"].split(","))
    turns = (
      f", and {data['turn_prompts']} user turns the target wrote itself\n"
      "  (`specsample.train.user_turns`: openers of every Spec-Bench category)"
      if data.get("turn_prompts") else ""
    )  # fmt: skip
    return (
      "- Prompts: the train split of `specsample.data.chat_prompts` in the proportions of "
      f"its `TRAINING_MIX`,\n  which covers every Spec-Bench category{turns}; the bench "
      "prompts and Spec-Bench's stay out.",
      f"- Data: the on-policy response {'stores' if ',' in data['store'] else 'store'} "
      f"{stores} (the target's responses: "
      "greedy;\n  temperature 1 for every 4th prompt): "
      f"{data.get('sequences')} training sequences, {data.get('positions')} positions\n"
      f"  ({data.get('response_tokens')} response tokens), generated in "
      f"{data.get('generation_minutes')} min. The target's features are\n  recomputed "
      "for each training batch (a teacher-forced pass) and never stored.",
    )
  return (
    "- Prompts: the train split of `specsample.data.chat_prompts` (this machine's own "
    "text:\n  standard-library code and docstrings, man pages, gettext messages, license "
    "texts, chat\n  templates); the bench prompts come from held-out sources.",
    "- Data: the target's responses (greedy; temperature 1 for every 4th prompt; up to\n"
    f"  {settings['max_new_tokens']} tokens) and its features at every position of prompt "
    f"+\n  response: {data.get('sequences')} training sequences, {data.get('positions')} "
    f"positions\n  ({data.get('response_tokens')} response tokens), generated in "
    f"{data.get('generation_minutes')} min.",
  )


def overall_text(metrics: dict) -> str:
  """The card's table of agreement on the whole held-out set beside the draft this one
  continues, and on training responses (the validate stage's), where measured."""
  sets = metrics.get("validation_overall")
  if not sets:
    return ""
  steps = lambda values: " / ".join(f"{x:.3f}" for x in values)  # noqa: E731
  rows = "\n".join(
    f"| {name} | {steps(v['draft'])} | {steps(v['baseline']) if 'baseline' in v else ''} |"
    for name, v in sets.items()
  )
  return (
    "\nOn the whole held-out set, by drafting step, beside the draft this one continues "
    f"(`{metrics['validation_baseline']}` when it was trained), and on as many sampled "
    "training responses (the `validate` stage):\n\n| sequences | this draft | the draft it "
    f"continues |\n|---|---|---|\n{rows}\n"
  )


def write_card(options: FeatureDraftOptions, metrics: dict) -> None:
  """bundle/feature_draft/MODEL_CARD.md."""
  write_text(os.path.join(options.bundle, "feature_draft", "MODEL_CARD.md"), card_text(metrics))
