"""scripts/compare/compare_hf.py end to end on tiny random T5s (the four decoders agree
greedily)."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest
from tiny_models import tiny_config

from specsample.bundled import BUNDLE_DIR
from specsample.checkpoints import save_hf_t5
from specsample.models.t5 import T5

ROOT = pathlib.Path(__file__).parent.parent
SAMPLE = pathlib.Path(__file__).parent / "data" / "ende_test_sample.tsv"


@pytest.mark.slow
def test_compare_hf_reports_all_four_decoders(tmp_path):
  # Equal encoder/decoder depths: transformers' cached generate needs them.
  target = T5.init_random(tiny_config(vocab=4000, d_model=24, num_decoder_layers=2), seed=0)
  draft = T5.init_random(tiny_config(vocab=4000, d_model=8, mlp_dim=16), seed=1)
  save_hf_t5(target, tmp_path / "target")
  save_hf_t5(draft, tmp_path / "draft")
  out = tmp_path / "report"
  argv = [
    sys.executable, str(ROOT / "scripts" / "compare" / "compare_hf.py"),
    "--target", str(tmp_path / "target"), "--draft", str(tmp_path / "draft"),
    "--vocab", str(BUNDLE_DIR / "spiece.model"), "--input-file", str(SAMPLE),
    "--num-prompts", "2", "--max-new-tokens", "6", "--repeats", "1", "--gamma", "3",
    "--batch-sizes", "1", "2", "--out", str(out),
  ]  # fmt: skip
  result = subprocess.run(argv, capture_output=True, text=True, timeout=900)
  assert result.returncode == 0, result.stderr[-3000:]
  report = json.loads((out / "compare_hf.json").read_text())
  assert report["gamma"] == 3 and report["num_prompts"] == 2
  greedy, sampled = report["modes"]
  assert greedy["temperature"] == 0.0 and sampled["temperature"] == 1.0
  assert greedy["greedy_agree"] == 2  # identical weights: the same greedy tokens everywhere
  for mode in (greedy, sampled):
    for name in ("hf_plain", "hf_assisted", "ours_plain", "ours_speculative"):
      assert mode[name]["seconds"] > 0 and mode[name]["tokens"] > 0
  assert [b["batch_size"] for b in report["batches"]] == [1, 2]
  assert (
    "| 0 | greedy outputs identical across all four | 2/2 prompts"
    in (out / "compare_hf.md").read_text()
  )
