"""The bundled English->German T5 target/draft pair (trained by scripts/train_bundled.py).

Files under `ende/`: `target/` and `draft/` (Hugging Face layout, float16 safetensors),
`spiece.model`, `metrics.json` and `MODEL_CARD.md`.
"""

from __future__ import annotations

import json
import pathlib

from specsample.checkpoints import Vocabulary, load_t5
from specsample.models.t5 import T5

BUNDLE_DIR = pathlib.Path(__file__).parent / "ende"
TASK_PREFIX = "translate English to German: "


def available() -> bool:
  return all((BUNDLE_DIR / part).exists() for part in ("target", "draft", "spiece.model"))


def load_pair(dtype: str = "float32") -> tuple[T5, T5, Vocabulary]:
  """(target, draft, vocabulary) of the bundled pair."""
  if not available():
    raise FileNotFoundError(
      f"the bundled English->German pair is not in {BUNDLE_DIR}; build it with "
      "`python scripts/train_bundled.py`"
    )
  target = load_t5(BUNDLE_DIR / "target", dtype=dtype)
  draft = load_t5(BUNDLE_DIR / "draft", dtype=dtype)
  return target, draft, Vocabulary(BUNDLE_DIR / "spiece.model")


def recommended_gamma(default: int = 4) -> int:
  """The gamma scripts/evaluate_bundled.py found best for the pair (speedup model with
  measured alpha, c and r), or `default`."""
  path = BUNDLE_DIR / "metrics.json"
  if not path.exists():
    return default
  return int(json.loads(path.read_text()).get("recommended_gamma", default))
