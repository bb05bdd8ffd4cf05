"""The SmolLM2 draft pipelines, stage by stage: prompts, generate, vocab, train, export,
card. Each draft kind's stages live in its module (`smollm2_token_draft`,
`smollm2_feature_draft`), its model card in its card module; this module runs the stages
a run names, in order, on one loaded target (`scripts/train/train_smollm2_draft.py`,
`scripts/train/train_smollm2_feature_draft.py`)."""

from __future__ import annotations

import os

from specsample.checkpoints import load_model
from specsample.checkpoints.feature_draft import feature_target, load_feature_draft
from specsample.train import smollm2_data as data
from specsample.train import smollm2_feature_card as feature_card
from specsample.train import smollm2_feature_draft as feature
from specsample.train import smollm2_token_card as token_card
from specsample.train import smollm2_token_draft as token


def run_token_draft(options: token.TokenDraftOptions) -> None:
  """Runs `options.stages` of the token-level draft in order (smollm2_data.StageError: a
  stage cannot run)."""
  os.makedirs(options.work, exist_ok=True)
  stages = options.stages.split(",")
  target, tokenizer = data.load_target()
  if "prompts" in stages:
    path = os.path.join(options.work, "train_prompts.jsonl")
    data.write_train_prompts(path, tokenizer, options.train_prompts, options.seed)
    bench_path = os.path.join(options.bundle, "prompts.jsonl")
    token.write_bench_prompts(bench_path, tokenizer, options.bench_prompts, options.seed)
  if "generate" in stages:
    token.stage_generate(options, target, tokenizer)
  if "vocab" in stages:
    token.stage_vocab(options, tokenizer)
  draft = token.stage_train(options, target) if "train" in stages else None
  if "export" in stages:
    token.stage_export(options, draft)
  if "card" in stages:
    embedding = target.params["embed"]["embedding"]
    shipped = load_model(os.path.join(options.bundle, "draft"), shared_embedding=embedding)
    token_card.write_card(options, token_card.write_metrics(options, shipped))


def run_feature_draft(options: feature.FeatureDraftOptions) -> None:
  """Runs `options.stages` of the feature draft in order (smollm2_data.StageError: a
  stage cannot run)."""
  os.makedirs(options.work, exist_ok=True)
  stages = options.stages.split(",")
  target, tokenizer = data.load_target(options.target_activations)
  if "prompts" in stages:
    path = os.path.join(options.work, "train_prompts.jsonl")
    data.write_train_prompts(path, tokenizer, options.train_prompts, options.seed)
  layers = feature.feature_layers(options)  # the generate and features stages read them too
  if "generate" in stages:
    feature.stage_generate(options, target.with_feature_layers(layers), tokenizer)
  if "features" in stages:
    feature.stage_features(options, target.with_feature_layers(layers), tokenizer)
  if "vocab" in stages:
    feature.stage_vocab(options, tokenizer)
  draft = None
  if "train" in stages:  # training reads the target's float32 output rows and embedding
    float32 = options.target_activations == "float32"
    trainer = target if float32 else data.load_target("float32")[0]
    draft = feature.stage_train(options, trainer, tokenizer, target.with_feature_layers(layers))
  if "export" in stages:
    feature.stage_export(options, draft)
  if "card" in stages:
    shipped = load_feature_draft(os.path.join(options.bundle, "feature_draft"), target)
    target = feature_target(target, shipped)
    metrics = feature_card.write_metrics(options, shipped, target, tokenizer)
    feature_card.write_card(options, metrics)
