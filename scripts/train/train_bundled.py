"""Builds a bundled target/draft pair: English->German (gettext catalogs) or docstrings.

--task ende        translate English to German, /usr/share/locale/de pairs (the default pair)
--task docstrings  summarize: standard-library function source -> first docstring sentence

Stages (each skipped when its output already exists in --work, so a run can resume):
  1. data      clean + split the task's pairs               -> work/data/*.tsv|jsonl
  2. vocab     SentencePiece (T5 ids: pad 0, eos 1, unk 2)      -> work/spiece.model
  3. target    T5 v1.1-style target, cross-entropy             -> work/target/
  4. draft     small draft: cross-entropy warm start, then on-policy forward-KL
               distillation from the target (DistillSpec)      -> work/draft/
  5. evaluate  BLEU (sacrebleu) of both on the test split, alpha of the pair
  6. bundle    float16 safetensors + spiece.model + card    -> specsample/bundled/<task>/

  python scripts/train/train_bundled.py --work out/bundled [--target-steps 3800 --draft-minutes 12]
  python scripts/train/train_bundled.py --task docstrings --work out/docstrings \
      --target-steps 1400 --draft-minutes 8
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
from specsample.data import docstrings
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


@dataclasses.dataclass(frozen=True)
class TaskSpec:
  prefix: str
  input_length: int
  target_length: int
  data_format: str  # "tsv" (gettext pairs) or "jsonl" (docstring examples)
  user_symbols: tuple[str, ...]


TASKS = {
  "ende": TaskSpec("translate English to German: ", 48, 48, "tsv", ("%s", "{0}")),
  "docstrings": TaskSpec("summarize: ", 64, 32, "jsonl", ()),
}
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
# Equal encoder and decoder depths: transformers' generate (which scripts/compare/compare_hf.py
# runs on the same weights) fails with a KV cache when the two differ.
BUNDLED = os.path.join(os.path.dirname(__file__), "..", "..", "specsample", "bundled")


def log(message: str) -> None:
  print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def split_path(work: str, split: str, task: TaskSpec) -> str:
  return os.path.join(work, "data", f"{split}.{task.data_format}")


def stage_data(work: str, task: TaskSpec) -> None:
  if os.path.exists(split_path(work, "test", task)):
    return
  os.makedirs(os.path.join(work, "data"), exist_ok=True)
  if task.data_format == "tsv":
    splits, write = build_pairs(), write_tsv
  else:
    splits, write = docstrings.build_examples(), docstrings.write_jsonl
  for split, pairs in splits.items():
    log(f"data: {split} {write(pairs, split_path(work, split, task))} pairs")


def read_pairs(work: str, split: str, task: TaskSpec) -> list[tuple[str, str]]:
  """(input text, target text) pairs of a split."""
  if task.data_format == "tsv":
    return read_tsv(split_path(work, split, task))
  examples = docstrings.read_jsonl(split_path(work, split, task))
  return [(e.code, e.docstring) for e in examples]


def stage_vocab(work: str, task: TaskSpec) -> Vocabulary:
  model = os.path.join(work, "spiece.model")
  if not os.path.exists(model):
    import sentencepiece as spm

    pairs = read_pairs(work, "train", task)
    corpus = os.path.join(work, "spiece_corpus.txt")
    with open(corpus, "w", encoding="utf-8") as f:
      for english, german in pairs:
        f.write(f"{english}\n{german}\n")
      f.write(task.prefix.strip() + "\n")
    spm.SentencePieceTrainer.train(
      input=corpus, model_prefix=os.path.join(work, "spiece"), vocab_size=VOCAB_SIZE,
      model_type="unigram", pad_id=0, eos_id=1, unk_id=2, bos_id=-1,
      user_defined_symbols=list(task.user_symbols), character_coverage=1.0, num_threads=2,
    )  # fmt: skip
    log("vocab: trained")
  return Vocabulary(model)


def encoded_split(work: str, vocab: Vocabulary, split: str, task: TaskSpec):
  pairs = read_pairs(work, split, task)
  inputs = pad_batch([vocab.encode(task.prefix + x) for x, _ in pairs], task.input_length)
  targets = pad_batch([vocab.encode(y) for _, y in pairs], task.target_length)
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


def stage_target(
  work: str, vocab: Vocabulary, task: TaskSpec, minutes: float, steps: int, lr: float
) -> T5:
  out = os.path.join(work, "target")
  if os.path.exists(os.path.join(out, "config.json")):
    return load_t5(out)
  _, inputs, targets = encoded_split(work, vocab, "train", task)
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


def stage_draft(work: str, vocab: Vocabulary, task: TaskSpec, target: T5, minutes: float) -> T5:
  out = os.path.join(work, "draft")
  if os.path.exists(os.path.join(out, "config.json")):
    return load_t5(out)
  start = time.time()
  _, inputs, targets = encoded_split(work, vocab, "train", task)
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
          current, lists, max_new_tokens=task.target_length, sampling=SamplingConfig(), seed=seed
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


def stage_evaluate(work: str, vocab: Vocabulary, task: TaskSpec, target: T5, draft: T5) -> dict:
  pairs = read_pairs(work, "test", task)
  metrics = evaluate_pair(
    target, draft, vocab, pairs, prefix=task.prefix, max_new_tokens=task.target_length
  )
  log(f"evaluate: {metrics}")
  return metrics


def stage_bundle(
  work: str, task: TaskSpec, target: T5, draft: T5, metrics: dict, bundle: str
) -> None:
  os.makedirs(bundle, exist_ok=True)
  for name, model in (("target", target), ("draft", draft)):
    save_hf_t5(model, os.path.join(bundle, name), dtype="float16")
  shutil.copy(os.path.join(work, "spiece.model"), os.path.join(bundle, "spiece.model"))
  test_name = f"test.{task.data_format}"
  shutil.copy(split_path(work, "test", task), os.path.join(bundle, test_name))
  with open(os.path.join(work, "training.json")) as f:
    training = json.load(f)
  with open(os.path.join(bundle, "metrics.json"), "w") as f:
    json.dump(
      {**metrics, "target_config": dataclasses.asdict(target.config),
       "draft_config": dataclasses.asdict(draft.config), "training": training}, f, indent=2,
    )  # fmt: skip
  log(f"bundle: written to {os.path.abspath(bundle)}")


def main() -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--task", choices=sorted(TASKS), default="ende")
  parser.add_argument("--work", default="out/bundled")
  parser.add_argument("--target-minutes", type=float, default=80, help="wall-clock cap")
  parser.add_argument("--target-steps", type=int, default=3800)
  parser.add_argument("--target-lr", type=float, default=1e-3, help="peak AdamW learning rate")
  parser.add_argument("--draft-minutes", type=float, default=12)
  parser.add_argument("--no-bundle", action="store_true", help="stop after evaluation")
  args = parser.parse_args()
  task = TASKS[args.task]
  os.makedirs(args.work, exist_ok=True)
  stage_data(args.work, task)
  vocab = stage_vocab(args.work, task)
  target = stage_target(
    args.work, vocab, task, args.target_minutes, args.target_steps, args.target_lr
  )
  draft = stage_draft(args.work, vocab, task, target, args.draft_minutes)
  metrics = stage_evaluate(args.work, vocab, task, target, draft)
  if not args.no_bundle:
    stage_bundle(args.work, task, target, draft, metrics, os.path.join(BUNDLED, args.task))
  return 0


if __name__ == "__main__":
  sys.exit(main())
