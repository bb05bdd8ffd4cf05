"""Builds the bundled English->German target/draft pair from the system's gettext catalogs.

Stages (each skipped when its output already exists in --work, so a run can resume):
  1. data      clean + split the /usr/share/locale/de pairs   -> work/data/*.tsv
  2. vocab     SentencePiece (T5 ids: pad 0, eos 1, unk 2)      -> work/spiece.model
  3. target    T5 v1.1-style target, cross-entropy             -> work/target/
  4. draft     small draft: cross-entropy warm start, then on-policy forward-KL
               distillation from the target (DistillSpec)      -> work/draft/
  5. evaluate  BLEU (sacrebleu) of both on the test split, alpha of the pair
  6. bundle    float16 safetensors + spiece.model + card       -> specsample/bundled/ende/

  python scripts/train_bundled.py --work out/bundled [--target-steps 3800 --draft-minutes 12]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sys
import time

import numpy as np

from specsample import SamplingConfig, generate
from specsample.checkpoints import Vocabulary, load_t5, save_hf_t5
from specsample.data.gettext_pairs import build_pairs, read_tsv, write_tsv
from specsample.eval.translation import evaluate_pair
from specsample.models.t5 import T5, T5Config
from specsample.train.seq2seq import (
  TrainSettings,
  batches,
  cross_entropy,
  forward_kl,
  pad_batch,
  train,
)

PREFIX = "translate English to German: "
INPUT_LENGTH, TARGET_LENGTH = 48, 48
VOCAB_SIZE = 4000
TARGET_CONFIG = T5Config(
  vocab_size=VOCAB_SIZE, d_model=256, num_heads=4, head_dim=64, mlp_dim=1024,
  num_encoder_layers=4, num_decoder_layers=4, mlp_activations=("gelu", "linear"),
  tie_word_embeddings=False,
)  # fmt: skip
DRAFT_CONFIG = T5Config(
  vocab_size=VOCAB_SIZE, d_model=64, num_heads=2, head_dim=32, mlp_dim=256,
  num_encoder_layers=2, num_decoder_layers=2, mlp_activations=("gelu", "linear"),
  tie_word_embeddings=False,
)  # fmt: skip
# Equal encoder and decoder depths: transformers' generate (which scripts/compare_hf.py
# runs on the same weights) fails with a KV cache when the two differ.
BUNDLE = os.path.join(os.path.dirname(__file__), "..", "specsample", "bundled", "ende")


def log(message: str) -> None:
  print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def stage_data(work: str) -> None:
  if os.path.exists(os.path.join(work, "data", "test.tsv")):
    return
  os.makedirs(os.path.join(work, "data"), exist_ok=True)
  for split, pairs in build_pairs().items():
    count = write_tsv(pairs, os.path.join(work, "data", f"{split}.tsv"))
    log(f"data: {split} {count} pairs")


def stage_vocab(work: str) -> Vocabulary:
  model = os.path.join(work, "spiece.model")
  if not os.path.exists(model):
    import sentencepiece as spm

    pairs = read_tsv(os.path.join(work, "data", "train.tsv"))
    corpus = os.path.join(work, "spiece_corpus.txt")
    with open(corpus, "w", encoding="utf-8") as f:
      for english, german in pairs:
        f.write(f"{english}\n{german}\n")
      f.write(PREFIX.strip() + "\n")
    spm.SentencePieceTrainer.train(
      input=corpus, model_prefix=os.path.join(work, "spiece"), vocab_size=VOCAB_SIZE,
      model_type="unigram", pad_id=0, eos_id=1, unk_id=2, bos_id=-1,
      user_defined_symbols=["%s", "{0}"], character_coverage=1.0, num_threads=2,
    )  # fmt: skip
    log("vocab: trained")
  return Vocabulary(model)


def encoded_split(work: str, vocab: Vocabulary, split: str):
  pairs = read_tsv(os.path.join(work, "data", f"{split}.tsv"))
  inputs = pad_batch([vocab.encode(PREFIX + en) for en, _ in pairs], INPUT_LENGTH)
  targets = pad_batch([vocab.encode(de) for _, de in pairs], TARGET_LENGTH)
  return pairs, inputs, targets


def record(work: str, **facts) -> None:
  """Adds training facts to work/training.json (they end up in the model card)."""
  path = os.path.join(work, "training.json")
  stored = {}
  if os.path.exists(path):
    with open(path) as f:
      stored = json.load(f)
  with open(path, "w") as f:
    json.dump({**stored, **facts}, f, indent=2)


def progress_logger(name: str):
  return lambda step, loss: log(f"{name}: step {step} loss {loss:.3f}")


def stage_target(work: str, vocab: Vocabulary, minutes: float, steps: int, lr: float) -> T5:
  out = os.path.join(work, "target")
  if os.path.exists(os.path.join(out, "config.json")):
    return load_t5(out)
  _, inputs, targets = encoded_split(work, vocab, "train")
  settings = TrainSettings(
    steps=steps, batch_size=64, learning_rate=lr, warmup_steps=300, max_seconds=minutes * 60
  )
  data = batches(inputs, targets, settings.batch_size, settings.seed)
  start = time.time()
  model, losses = train(
    T5.init_random(TARGET_CONFIG, seed=0), cross_entropy, lambda _: next(data), settings,
    progress=progress_logger("target"),
  )  # fmt: skip
  record(
    work,
    target_minutes=round((time.time() - start) / 60, 1),
    train_pairs=len(inputs),
    target=f"{losses[-1][0]} steps x 64, cross-entropy {losses[-1][1]:.2f}, "
    f"{(time.time() - start) / 60:.0f} min",
  )
  save_hf_t5(model, out)
  return model


def stage_draft(work: str, vocab: Vocabulary, target: T5, minutes: float) -> T5:
  out = os.path.join(work, "draft")
  if os.path.exists(os.path.join(out, "config.json")):
    return load_t5(out)
  start = time.time()
  _, inputs, targets = encoded_split(work, vocab, "train")
  # Warm start on the data (a third of the budget), then on-policy distillation.
  warm = TrainSettings(steps=1500, batch_size=64, learning_rate=3e-3, max_seconds=minutes * 20)
  data = batches(inputs, targets, warm.batch_size, 1)
  draft, warm_log = train(
    T5.init_random(DRAFT_CONFIG, seed=1), cross_entropy, lambda _: next(data), warm,
    progress=progress_logger("draft warm-up"),
  )  # fmt: skip

  prompts = batches(inputs, targets, 64, 2)
  pool: list = []

  def on_policy(current: T5):
    """Batches of sequences the current draft samples, refreshed every 8 steps."""
    if not pool:
      for seed in range(8):
        batch_inputs, _ = next(prompts)
        lists = [row[row > 0].tolist() for row in batch_inputs]
        sampled = generate(
          current, lists, max_new_tokens=TARGET_LENGTH, sampling=SamplingConfig(), seed=seed
        )
        pool.append((batch_inputs, np.asarray(sampled.tokens)))
    return pool.pop()

  settings = TrainSettings(steps=800, batch_size=64, learning_rate=1e-3, warmup_steps=50,
                           max_seconds=minutes * 40)  # fmt: skip
  draft, kl_log = train(
    draft, lambda c, p, i, t: forward_kl(c, p, target, i, t), on_policy, settings,
    progress=progress_logger("draft distillation"),
  )  # fmt: skip
  record(work, draft_minutes=round((time.time() - start) / 60, 1))
  record(work, draft=f"{warm_log[-1][0]} warm-up + {kl_log[-1][0]} distillation steps x 64, "
         f"final KL {kl_log[-1][1]:.2f}")  # fmt: skip
  save_hf_t5(draft, out)
  return draft


def stage_evaluate(work: str, vocab: Vocabulary, target: T5, draft: T5) -> dict:
  pairs = read_tsv(os.path.join(work, "data", "test.tsv"))
  metrics = evaluate_pair(target, draft, vocab, pairs, prefix=PREFIX, max_new_tokens=TARGET_LENGTH)
  log(f"evaluate: {metrics}")
  return metrics


def stage_bundle(work: str, target: T5, draft: T5, metrics: dict) -> None:
  os.makedirs(BUNDLE, exist_ok=True)
  for name, model in (("target", target), ("draft", draft)):
    save_hf_t5(model, os.path.join(BUNDLE, name), dtype="float16")
  shutil.copy(os.path.join(work, "spiece.model"), os.path.join(BUNDLE, "spiece.model"))
  shutil.copy(os.path.join(work, "data", "test.tsv"), os.path.join(BUNDLE, "test.tsv"))
  with open(os.path.join(work, "training.json")) as f:
    training = json.load(f)
  with open(os.path.join(BUNDLE, "metrics.json"), "w") as f:
    json.dump(
      {**metrics, "target_config": dataclasses.asdict(target.config),
       "draft_config": dataclasses.asdict(draft.config), "training": training}, f, indent=2,
    )  # fmt: skip
  log(f"bundle: written to {os.path.abspath(BUNDLE)}")


def main() -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--work", default="out/bundled")
  parser.add_argument("--target-minutes", type=float, default=80, help="wall-clock cap")
  parser.add_argument("--target-steps", type=int, default=3800)
  parser.add_argument("--target-lr", type=float, default=1e-3, help="peak AdamW learning rate")
  parser.add_argument("--draft-minutes", type=float, default=12)
  parser.add_argument("--no-bundle", action="store_true", help="stop after evaluation")
  args = parser.parse_args()
  os.makedirs(args.work, exist_ok=True)
  stage_data(args.work)
  vocab = stage_vocab(args.work)
  target = stage_target(args.work, vocab, args.target_minutes, args.target_steps, args.target_lr)
  draft = stage_draft(args.work, vocab, target, args.draft_minutes)
  metrics = stage_evaluate(args.work, vocab, target, draft)
  if not args.no_bundle:
    stage_bundle(args.work, target, draft, metrics)
  return 0


if __name__ == "__main__":
  sys.exit(main())
