"""The bundled English->German pair and the `specsample translate` command."""

from __future__ import annotations

import json
import pathlib

import pytest

from specsample.bundled import BUNDLE_DIR, TASK_PREFIX, available, pair_dir
from specsample.cli import main
from specsample.cli.compare import compare
from specsample.core import SamplingConfig
from specsample.data.gettext_pairs import read_tsv
from specsample.decoding import SpeculativeSettings
from specsample.pairs import load_pair

SAMPLE = pathlib.Path(__file__).parent / "data" / "ende_test_sample.tsv"


@pytest.fixture(scope="module")
def pair():
  assert available(), f"the bundled pair is missing from {BUNDLE_DIR}"
  loaded = load_pair("bundled:ende")
  return loaded.target, loaded.draft, loaded.tokenizer


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


def test_load_pair_gives_each_bundled_t5_pair_with_its_settings():
  for name, prefix in (("ende", TASK_PREFIX), ("docstrings", "summarize: ")):
    pair = load_pair(f"bundled:{name}")
    metrics = json.loads((pair_dir(name) / "metrics.json").read_text())
    assert pair.gamma == metrics["recommended_gamma"] and pair.prefix == prefix
    assert (pair.weights, pair.activations, pair.bundled) == ("float32", "float32", True)
    assert pair.target.vocab_size == pair.draft.vocab_size and pair.tokenizer.vocab_size > 0
  behind = load_pair("bundled:ende", prompt_lookup=True)
  assert type(behind.draft).__name__ == "LookupThenModel" and "prompt lookup" in behind.title


@pytest.mark.parametrize(
  ("arguments", "message"),
  [
    ({"target": "bundled:xsum"}, "the bundled T5 pairs are bundled:ende, bundled:docstrings"),
    ({"target": "bundled:ende", "draft": "ngram"}, "has its own draft"),
    ({"target": "bundled:ende", "tokenizer": "x.model"}, "has its own vocabulary"),
    ({"target": "bundled:ende", "weights": "gguf"}, "float32 matrices only"),
    ({"target": "bundled:ende", "activations": "int8"}, "needs --weights gguf"),
  ],
)
def test_load_pair_refuses_what_a_bundled_t5_pair_cannot_take(arguments, message):
  with pytest.raises(ValueError, match=message):
    load_pair(**arguments)
