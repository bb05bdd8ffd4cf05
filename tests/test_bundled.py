"""The bundled English->German pair and the `specsample translate` command."""

from __future__ import annotations

import json
import pathlib

import pytest

from specsample.bundled import BUNDLE_DIR, TASK_PREFIX, available, load_pair
from specsample.cli import main
from specsample.cli.compare import compare
from specsample.core import SamplingConfig
from specsample.data.gettext_pairs import read_tsv
from specsample.decoding import SpeculativeSettings

SAMPLE = pathlib.Path(__file__).parent / "data" / "ende_test_sample.tsv"


@pytest.fixture(scope="module")
def pair():
  assert available(), f"the bundled pair is missing from {BUNDLE_DIR}"
  return load_pair()


def test_bundle_contents_and_card():
  metrics = json.loads((BUNDLE_DIR / "metrics.json").read_text())
  for key in ("target_bleu", "draft_bleu", "alpha_t0", "alpha_t1", "c", "test_pairs"):
    assert key in metrics
  assert metrics["target_bleu"] > metrics["draft_bleu"] and metrics["test_pairs"] == len(
    read_tsv(BUNDLE_DIR / "test.tsv")
  )
  card = (BUNDLE_DIR / "MODEL_CARD.md").read_text()
  assert f"{metrics['target_bleu']:.2f}" in card and f"{metrics['alpha_t0']:.3f}" in card
  size = sum(f.stat().st_size for f in BUNDLE_DIR.rglob("*") if f.is_file())
  assert size < 40e6


def test_greedy_speculative_translation_equals_target_greedy_for_every_sample(pair):
  target, draft, vocab = pair
  sentences = [english for english, _ in read_tsv(SAMPLE)]
  assert len(sentences) == 48
  prompts = [vocab.encode(TASK_PREFIX + sentence) for sentence in sentences]
  for gamma in (3, 5):
    comparison = compare(
      target,
      draft,
      prompts,
      SpeculativeSettings(gamma=gamma, max_new_tokens=64, sampling=SamplingConfig(0.0)),
      repeats=1,
    )
    assert comparison.identical
  assert comparison.speculative.stats.alpha > 0.3


def test_translate_command_prints_german_alpha_and_speedup(capsys, tmp_path):
  trace = tmp_path / "trace.html"
  code = main(["translate", "Could not open file %s", "--repeats", "1", "--trace", str(trace)])
  assert code == 0
  captured = capsys.readouterr()
  translation = captured.out.strip().splitlines()[0]
  assert translation and translation != "Could not open file %s"
  assert "%s" in translation  # the placeholder survives translation
  assert "alpha" in captured.err and "speedup" in captured.err
  assert "identical to the target's own greedy output: yes" in captured.err
  page = trace.read_text()
  assert page.count('class="iteration"') >= 1 and 'class="correction"' in page


def test_sample_is_part_of_the_shipped_test_split():
  shipped = set(read_tsv(BUNDLE_DIR / "test.tsv"))
  assert set(read_tsv(SAMPLE)) <= shipped
