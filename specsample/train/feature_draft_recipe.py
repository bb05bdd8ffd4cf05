"""The feature draft's recipe of the training pipeline (specsample.train.pipeline;
EAGLE-style): the bundled feature-level draft of SmolLM2-135M-Instruct (the default
target; `target` names another GGUF), trained on this machine; its command line is
scripts/train/train_smollm2_feature_draft.py.

The draft reads the target's features (its final-normed hidden states, the output layer's
input) of the committed text and predicts the next feature with one decoder layer; the
target's own output rows (for the draft's reduced vocabulary) turn it into logits
(specsample.models.feature_draft, Li et al. 2024, "EAGLE").

Stages (`FeatureDraftOptions.stages`; each resumes from what `work` already holds). The
training data is either the committed store of on-policy responses (the default,
`features` "live": each batch's features are computed from the store's ids when it is
drawn, `store_features.LiveFeatures`; or "shards", after the stage
  1. features  the target's features of every stored response, one shard per store shard
               -> shards/store-*.npz)
or the work directory's own responses (`features` "shards"):
  1. prompts   the train prompts of the token-level draft (specsample.data.chat_prompts,
               the train split; the bench prompts come from held-out sources)
               -> work/train_prompts.jsonl
  2. generate  the target's responses (greedy; temperature 1 for every 4th prompt) with its
               features at every position of prompt + response, one shard per batch
               -> work/shards/*.npz
and then:
  3. vocab     the K most frequent target tokens (+ special tokens) -> work/vocab.json
  4. train     the draft (feature regression + distillation of the target's next-token
               distribution) -> work/checkpoint.npz, work/train_log.json
     validate  the held-out agreement of the checkpoint's draft (finished or cut) beside
               the draft it is measured against -> work/validation.json,
               work/validation_baseline.json
  5. export    float16 draft (no embedding: it shares the target's) -> bundle/feature_draft
  6. card      metrics.json and MODEL_CARD.md (specsample.train.feature_draft_card)
"""

from __future__ import annotations

import dataclasses
import functools
import glob
import json
import os
import time
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from specsample.data import chat_prompts
from specsample.files import write_json
from specsample.models import FeatureDraft
from specsample.models.feature_draft import with_fusion
from specsample.train import distill_features as df
from specsample.train.feature_draft_options import (
  STAGES,
  FeatureDraftOptions,
  command_line,
  feature_layers,
  load_sequences,
  shard_directory,
  store_paths,
)
from specsample.train.held_out import (
  LIVE_VALIDATION,
  fit_sample,
  greedy_held_out,
  response_limit,
  scored_live,
  scored_validation,
)
from specsample.train.optim import make_optimizer
from specsample.train.pipeline import PipelineRun
from specsample.train.pipeline_data import (
  BUNDLE,
  StageError,
  agreement_by_task,
  always_kept,
  batches_to_generate,
  earlier_training,
  generate_batches,
  log,
  log_export,
  progress_bar,
  read_json,
  train_with_progress,
  vocab_coverage,
  write_train_prompts,
  write_training_log,
  write_validation,
)
from specsample.train.resume import load_training_state, save_training_state
from specsample.train.target_responses import Response

# ---------------------------------------------------------------- 2. generate


def write_shard(path: str, rows, responses: list[Response], prompts, temperature: float) -> int:
  """One batch's sequences (prompt + response) and features, written atomically.
  -> its response tokens."""
  sequences = [r.prompt + r.tokens for r in responses]
  np.savez(
    path + ".tmp.npz",
    tokens=np.concatenate([np.asarray(s, np.int32) for s in sequences]),
    lengths=np.asarray([len(s) for s in sequences], np.int32),
    prompt_lengths=np.asarray([len(r.prompt) for r in responses], np.int32),
    features=np.concatenate([r.features for r in responses]),  # float16[sum(N - 1), d]
    index=np.asarray([i for i, _ in rows], np.int32),
    task=np.asarray([prompts[i].task for i, _ in rows]),
    temperature=np.float32(temperature),
  )
  os.replace(path + ".tmp.npz", path)
  return sum(len(r.tokens) for r in responses)


def stage_generate(options: FeatureDraftOptions, target, tokenizer) -> None:
  prompts = chat_prompts.read_jsonl(os.path.join(options.work, "train_prompts.jsonl"))
  directory = shard_directory(options)
  os.makedirs(directory, exist_ok=True)
  done = {os.path.basename(p)[: -len(".npz")] for p in glob.glob(os.path.join(directory, "*.npz"))}
  todo = batches_to_generate(
    options, prompts, tokenizer, lambda temperature, start: f"t{temperature:g}-{start:05d}", done
  )

  def write(batch_id, temperature, rows, responses):
    path = os.path.join(directory, batch_id + ".npz")
    return write_shard(path, rows, responses, prompts, temperature)

  _, minutes = generate_batches(
    target, todo, max_new_tokens=options.max_new_tokens, minutes=options.generate_minutes,
    seed=options.seed + len(done), write=write, features=True, k=0,
  )  # fmt: skip
  stats_path = os.path.join(options.work, "generation.json")
  stats = read_json(stats_path)
  stats["generation_minutes"] = round(stats.get("generation_minutes", 0.0) + minutes, 1)
  write_json(stats_path, stats)


def stage_features(options: FeatureDraftOptions, target, tokenizer) -> None:
  """The target's features of the store's responses (`target`: with the feature layers
  the draft fuses) -> work/shards/store-*.npz, for `options.features_minutes`."""
  from specsample.train.pipeline_data import encode
  from specsample.train.response_store import ResponseStore
  from specsample.train.store_features import features_into

  paths = store_paths(options)
  if len(paths) > 1:
    raise StageError("features: the feature shards are of one store; train on several with "
                     "--features live")  # fmt: skip
  store = ResponseStore(paths[0])
  if not store.shard_paths():
    raise StageError(f"features: {paths[0]} holds no responses "
                     "(scripts/train/generate_on_policy.py makes them)")  # fmt: skip
  kept = store.settings()
  if kept.activations != options.target_activations:
    log(f"features: the store's responses are of the {kept.activations} target; its "
        f"features are read with {options.target_activations}")  # fmt: skip
  with progress_bar() as bar:
    task = bar.add_task("target features", total=None)

    def progress(done, total, rate):
      bar.update(task, completed=done, total=total,
                 description=f"target features ({rate:.0f} positions/s)")  # fmt: skip

    written, positions, seconds = features_into(
      target, store, lambda text: encode(tokenizer, text), shard_directory(options),
      minutes=options.features_minutes, progress=progress,
    )  # fmt: skip
  log(f"features: {written} shards, {positions} positions in {seconds / 60:.1f} min "
      f"({positions / max(seconds, 1e-9):.0f} positions/s)")  # fmt: skip


# ---------------------------------------------------------------- 3. vocab


def stage_vocab(options: FeatureDraftOptions, tokenizer) -> None:
  """The output vocabulary: the most frequent response tokens (the target's own outputs),
  and the share of validation response tokens each size covers."""
  path = os.path.join(options.work, "vocab.json")
  if os.path.exists(path):
    return
  train, validation = load_sequences(options, tokenizer)
  responses = [s.tokens[s.prompt_length :] for s in train]
  held = np.concatenate([s.tokens[s.prompt_length :] for s in validation] or [[0]])
  ids, coverage, _ = vocab_coverage(responses, held, options.output_vocab, always_kept(tokenizer))
  write_json(path, {"size": options.output_vocab, "coverage": coverage, "ids": ids.tolist()})
  log(f"vocab: {options.output_vocab} tokens; validation response-token coverage by size "
      f"{coverage}")  # fmt: skip


# ---------------------------------------------------------------- 4. train


def save_checkpoint(
  path: str, draft: FeatureDraft, opt_state, step: int, dtype: str = "float32"
) -> None:
  save_training_state(path, df.split_frozen(draft.params)[0], opt_state, step, dtype)


def load_checkpoint(path: str, draft: FeatureDraft, settings: df.FeatureDistillSettings):
  """(draft, opt_state, step) from `path`, shaped like `draft` and its optimizer state."""
  trainable, frozen = df.split_frozen(draft.params)
  opt_state = make_optimizer(settings).init(trainable)
  trainable, opt_state, step = load_training_state(path, trainable, opt_state)
  return FeatureDraft(params={**trainable, **frozen}, config=draft.config), opt_state, step


def fused_draft(path: str, target, layers: tuple[int, ...], stage: str) -> FeatureDraft:
  """The feature draft at `path` reading the target's `layers` (one that read the final
  state alone is widened by `with_fusion`: it proposes as it did)."""
  from specsample.checkpoints.feature_draft import load_feature_draft

  draft = load_feature_draft(path, target)
  if layers and not draft.config.feature_layers:
    draft = with_fusion(draft, layers)
  if draft.config.feature_layers != layers:
    raise StageError(f"{stage}: {path} fuses the target's layers "
                     f"{draft.config.feature_layers}; --feature-layers: {layers}")  # fmt: skip
  return draft


def starting_draft(options: FeatureDraftOptions, target) -> FeatureDraft:
  """The draft training starts from (`target`: float32, its output rows and embedding):
  --init-from's (e.g. to train with more drafting steps), else a new one of the kept
  tokens in work/vocab.json."""
  layers = feature_layers(options)
  if options.init_from:
    return fused_draft(options.init_from, target, layers, "train")
  with open(os.path.join(options.work, "vocab.json")) as f:
    ids = np.asarray(json.load(f)["ids"], np.int32)
  return df.draft_for_target(target, ids, num_layers=options.layers, seed=options.seed,
                             feature_layers=layers)  # fmt: skip


def train_settings(options: FeatureDraftOptions) -> df.FeatureDistillSettings:
  return df.FeatureDistillSettings(
    steps=options.train_steps, tokens_per_batch=options.tokens_per_batch,
    learning_rate=options.learning_rate, warmup_steps=min(100, options.train_steps // 10),
    cls_weight=options.cls_weight, noise=options.noise, prompt_weight=options.prompt_weight,
    steps_ahead=options.steps_ahead, max_seconds=60 * options.train_minutes, seed=options.seed,
  )  # fmt: skip


def stage_train(
  options: FeatureDraftOptions, target, tokenizer=None, feature_target=None
) -> FeatureDraft:
  """Trains the draft (`target`: float32, its output rows and embedding); with live
  features, `feature_target` (the target in the store's arithmetic, with the layers the
  draft fuses) computes each batch's features and `tokenizer` re-encodes the prompts."""
  draft = starting_draft(options, target)
  if options.init_from:
    log(f"train: starting from {options.init_from}")
  path = os.path.join(options.work, "checkpoint.npz")
  train, validation = load_sequences(options, tokenizer)
  validation = scored_validation(options, validation, feature_target)
  complete = None
  if options.features == "live":
    from specsample.train.store_features import LiveFeatures

    complete = LiveFeatures(feature_target)
  if train and train[0].features is not None and train[0].features.shape[-1] != draft.feature_size:
    raise StageError(f"train: the shards hold features {train[0].features.shape[-1]} wide, the "
                     f"draft reads {draft.feature_size}: generate them with the same "
                     "--feature-layers")  # fmt: skip
  positions = sum(len(s.tokens) - 1 for s in train)
  responses = sum(len(s.tokens) - s.prompt_length for s in train)
  log(f"train: {len(train)} sequences ({positions} positions, {responses} response tokens), "
      f"{df.trainable_parameter_count(draft) / 1e6:.2f}M trainable parameters")  # fmt: skip
  settings = train_settings(options)
  opt_state, start = None, 0
  held = validation[:40]
  if os.path.exists(path):
    draft, opt_state, start = load_checkpoint(path, draft, settings)
    log(f"train: resuming at step {start}")
  earlier, finished = earlier_training(options.work, settings.steps)
  previous = read_json(options.previous_log) if options.previous_log else {}
  if start < settings.steps and not finished:
    stream = df.batches(train, settings.tokens_per_batch, options.seed, start=start,
                        prompt_weight=settings.prompt_weight, complete=complete)  # fmt: skip
    begin = time.time()
    draft, _, history = train_with_progress(
      df.train, draft, lambda: next(stream), settings, opt_state=opt_state, start_step=start,
      label="training",
      save=functools.partial(save_checkpoint, path, dtype=options.checkpoint_dtype),
      validate=lambda model: df.agreement(model, held, steps=3),
    )  # fmt: skip
    minutes = (time.time() - begin) / 60 + (0.0 if earlier else previous.get("minutes", 0.0))
    write_training_log(
      options.work, earlier, history, minutes, sequences=len(train), positions=positions,
      response_tokens=responses, settings=dataclasses.asdict(options),
      command=command_line(options),
    )  # fmt: skip
  write_validation(options.work, lambda items: df.agreement(draft, items, steps=3), validation,
                   task=lambda s: s.task)  # fmt: skip
  return draft


def checkpoint_draft(
  options: FeatureDraftOptions, float32_target: Callable[[], Any], stage: str
) -> tuple[FeatureDraft, int]:
  """(the draft in work/checkpoint.npz, finished or cut, the step it reached); the target
  (float32: its output rows and embedding) is loaded only once the checkpoint is found."""
  path = os.path.join(options.work, "checkpoint.npz")
  if not os.path.exists(path):
    raise StageError(f"{stage}: {path} does not exist (the train stage makes it)")
  template = starting_draft(options, float32_target())
  draft, _, step = load_checkpoint(path, template, train_settings(options))
  if step < options.train_steps:
    log(f"{stage}: the draft of a cut training (step {step} of {options.train_steps})")
  return draft, step


def stage_validate(options: FeatureDraftOptions, target, tokenizer, feature_target) -> dict:
  """The held-out agreement by drafting step of the draft in work/checkpoint.npz (a
  finished or a cut training) beside the draft it is measured against (--init-from's,
  else the bundle's feature draft), on the same sequences scored against the target's
  greedy tokens: work/validation.json (as the train stage writes it) and
  work/validation_baseline.json. Then both drafts on the target's greedy responses to the
  same prompts (`held_out.greedy_held_out`), work/validation_greedy.json, and the draft on
  as many sampled training responses (`held_out.fit_sample`), work/validation_train.json.
  -> {"draft": scores, "baseline": scores, "greedy": {"draft", "baseline"}, "train": scores}."""
  draft, step = checkpoint_draft(options, lambda: target, "validate")
  baseline_path = options.init_from or os.path.join(options.bundle, "feature_draft")
  baseline = fused_draft(baseline_path, target, feature_layers(options), "validate")
  train, validation = load_sequences(options, tokenizer)
  validation = scored_validation(options, validation, feature_target)
  held = validation[:LIVE_VALIDATION]  # the prompts of as many as `scored_live` scores
  fit = scored_live(fit_sample(train, len(held)), feature_target)
  greedy = greedy_held_out(feature_target, held, response_limit(options))
  greedy = scored_live(greedy, feature_target)  # their features, whatever --features says
  log(f"validate: the draft at step {step} against {baseline_path} on {len(validation)} "
      "held-out sequences")  # fmt: skip

  def agreement_of(model):  # sequences -> agreement by drafting step
    return lambda items: df.agreement(model, items, steps=3)

  def by_task(model, sequences):
    return agreement_by_task(agreement_of(model), sequences, lambda s: s.task)

  scores = write_validation(options.work, agreement_of(draft), validation, task=lambda s: s.task)
  base = by_task(baseline, validation)
  write_json(os.path.join(options.work, "validation_baseline.json"),
             {"draft": baseline_path, "scores": base}, indent=1)  # fmt: skip
  log(f"validate: {baseline_path} {json.dumps(base['all'])}")
  on_greedy = {"draft": by_task(draft, greedy), "baseline": by_task(baseline, greedy)}
  write_json(os.path.join(options.work, "validation_greedy.json"),
             {"sequences": len(greedy), "step": step, "baseline": baseline_path,
              "scores": on_greedy}, indent=1)  # fmt: skip
  log(f"validate: on the target's greedy responses {json.dumps(on_greedy['draft']['all'])}, "
      f"{baseline_path} {json.dumps(on_greedy['baseline']['all'])}")  # fmt: skip
  seen = by_task(draft, fit)
  write_json(os.path.join(options.work, "validation_train.json"),
             {"sequences": len(fit), "step": step, "scores": seen}, indent=1)  # fmt: skip
  log(f"validate: the draft on {len(fit)} sampled training responses {json.dumps(seen['all'])}")
  return {"draft": scores, "baseline": base, "greedy": on_greedy, "train": seen}


# ---------------------------------------------------------------- 5. export; the stages


def stage_export(options: FeatureDraftOptions, draft: FeatureDraft) -> None:
  from specsample.checkpoints.feature_draft import save_feature_draft

  directory = os.path.join(options.bundle, "feature_draft")
  save_feature_draft(draft, directory, dtype="float16")
  log_export(directory)


@dataclasses.dataclass(frozen=True)
class FeatureDraftRecipe:
  """The feature draft's stages (specsample.train.pipeline.Recipe): one decoder layer over
  the target's (fused) features, trained on its responses with the features recomputed
  by its arithmetic (`target_activations`) and its float32 output rows."""

  options: FeatureDraftOptions = FeatureDraftOptions()
  name: ClassVar[str] = "feature draft"
  stages: ClassVar[tuple[str, ...]] = STAGES

  @property
  def target_activations(self) -> str:
    return self.options.target_activations

  def run_stage(self, stage: str, run: PipelineRun) -> None:
    options = self.options
    layers = feature_layers(options)  # generate, features and train read the same layers
    if stage == "prompts":
      path = os.path.join(options.work, "train_prompts.jsonl")
      write_train_prompts(path, run.tokenizer, options.train_prompts, options.seed)
    elif stage == "generate":
      stage_generate(options, run.target.with_feature_layers(layers), run.tokenizer)
    elif stage == "features":
      stage_features(options, run.target.with_feature_layers(layers), run.tokenizer)
    elif stage == "vocab":
      stage_vocab(options, run.tokenizer)
    elif stage == "train":  # training reads the target's float32 output rows and embedding
      features = run.target.with_feature_layers(layers)
      run.draft = stage_train(options, run.float32_target(), run.tokenizer, features)
    elif stage == "validate":
      features = run.target.with_feature_layers(layers)
      stage_validate(options, run.float32_target(), run.tokenizer, features)
    elif stage == "export":  # this run's training, else the committed checkpoint's draft
      draft = run.draft
      if draft is None:
        draft, step = checkpoint_draft(options, run.float32_target, stage)
        installed = os.path.exists(options.bundle) and os.path.samefile(options.bundle, BUNDLE)
        if step < options.train_steps and installed:
          raise StageError(
            f"export: the training stopped at step {step} of {options.train_steps}; the "
            f"installed bundle ({BUNDLE}) ships finished drafts only: give --bundle DIR to "
            "try this one (specsample bench --draft DIR/feature_draft)"
          )
      stage_export(options, draft)
    elif stage == "card":
      from specsample.checkpoints.feature_draft import feature_target, load_feature_draft
      from specsample.train import feature_draft_card as card

      shipped = load_feature_draft(os.path.join(options.bundle, "feature_draft"), run.target)
      target = feature_target(run.target, shipped)
      card.write_card(options, card.write_metrics(options, shipped, target, run.tokenizer))
