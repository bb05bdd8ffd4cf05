"""BLEU and ROUGE as T5 reports them, and the paired bootstrap."""

from __future__ import annotations

import pytest
import sacrebleu

from specsample.eval import metrics


def test_bleu_is_sacrebleu_corpus_bleu_with_t5_settings():
  predictions = ["Die Katze sitzt auf der Matte.", "Hallo Welt"]
  references = ["Die Katze saß auf der Matte.", "Hallo schöne Welt"]
  expected = sacrebleu.corpus_bleu(predictions, [references], tokenize="intl").score
  assert metrics.bleu(predictions, references)["bleu"] == pytest.approx(expected)
  assert metrics.bleu(references, references)["bleu"] == pytest.approx(100.0)
  assert 0 < metrics.bleu(predictions, references)["bleu"] < 100


def test_rouge_matches_hand_computed_values():
  # prediction "the cat sat", reference "the cat sat on the mat":
  # unigrams P = 3/3, R = 3/6 -> F = 2/3; bigrams P = 2/2, R = 2/5 -> F = 4/7.
  scores = metrics.rouge(["the cat sat"], ["the cat sat on the mat"])
  assert scores["rouge1"] == pytest.approx(100 * 2 / 3)
  assert scores["rouge2"] == pytest.approx(100 * 4 / 7)
  assert scores["rougeL"] == pytest.approx(100 * 2 / 3)
  # The mean over examples.
  two = metrics.rouge(["the cat sat", "a b"], ["the cat sat on the mat", "a b"])
  assert two["rouge1"] == pytest.approx(100 * (2 / 3 + 1) / 2)


def test_score_rejects_unknown_metrics_and_mismatched_lists():
  with pytest.raises(ValueError, match="unknown metric"):
    metrics.score("meteor", ["a"], ["a"])
  with pytest.raises(ValueError, match="2 predictions for 1 references"):
    metrics.bleu(["a", "b"], ["a"])


@pytest.mark.parametrize("metric", ["bleu", "rouge"])
def test_paired_bootstrap_interval(metric):
  references = [f"word{i} common text here number {i}" for i in range(30)]
  good = list(references)
  bad = [f"other{i} text" for i in range(30)]
  same = metrics.paired_bootstrap(metric, good, good, references, samples=50)
  for interval in same.values():
    assert interval == {"difference": 0.0, "low": 0.0, "high": 0.0}
  worse = metrics.paired_bootstrap(metric, good, bad, references, samples=50)
  for interval in worse.values():
    assert interval["high"] < 0 and interval["low"] <= interval["difference"] <= interval["high"]
