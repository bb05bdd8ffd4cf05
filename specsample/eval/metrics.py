"""Quality metrics as T5 reports them: BLEU (sacrebleu) and ROUGE-1/2/L (rouge-score).

Both follow `t5.evaluation.metrics`: corpus BLEU with sacrebleu's "intl" tokenization and
exponential smoothing; ROUGE F-measures with rouge-score's Porter stemmer off, summaries
split into lines at " . " for ROUGE-Lsum. ROUGE here is the plain mean over examples
(T5 reports the middle of a bootstrap, which converges to the same mean), so reruns give
identical numbers. All scores are on a 0-100 scale.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

METRICS = ("bleu", "rouge")
ROUGE_KEYS = ("rouge1", "rouge2", "rougeL", "rougeLsum")


def _check(predictions: Sequence[str], references: Sequence[str]) -> None:
  if len(predictions) != len(references):
    raise ValueError(f"{len(predictions)} predictions for {len(references)} references")
  if not predictions:
    raise ValueError("no predictions to score")


def bleu(predictions: Sequence[str], references: Sequence[str]) -> dict[str, float]:
  """{"bleu": corpus BLEU}, one reference per prediction."""
  import sacrebleu

  _check(predictions, references)
  score = sacrebleu.corpus_bleu(
    list(predictions),
    [list(references)],
    smooth_method="exp",
    tokenize="intl",
    use_effective_order=False,
  )
  return {"bleu": float(score.score)}


def _rouge_lines(summary: str) -> str:
  return summary.replace(" . ", " .\n")


def rouge_per_example(
  predictions: Sequence[str], references: Sequence[str]
) -> dict[str, np.ndarray]:
  """F-measure (0-100) of each ROUGE key for each example: {key: float[examples]}."""
  from rouge_score import rouge_scorer

  _check(predictions, references)
  scorer = rouge_scorer.RougeScorer(list(ROUGE_KEYS))
  scores = {key: np.zeros(len(predictions)) for key in ROUGE_KEYS}
  for i, (prediction, reference) in enumerate(zip(predictions, references, strict=True)):
    result = scorer.score(target=_rouge_lines(reference), prediction=_rouge_lines(prediction))
    for key in ROUGE_KEYS:
      scores[key][i] = 100 * result[key].fmeasure
  return scores


def rouge(predictions: Sequence[str], references: Sequence[str]) -> dict[str, float]:
  """{"rouge1", "rouge2", "rougeL", "rougeLsum"}: mean F-measures."""
  return {k: float(v.mean()) for k, v in rouge_per_example(predictions, references).items()}


def score(metric: str, predictions: Sequence[str], references: Sequence[str]) -> dict[str, float]:
  if metric == "bleu":
    return bleu(predictions, references)
  if metric == "rouge":
    return rouge(predictions, references)
  raise ValueError(f"unknown metric {metric!r}; expected one of {METRICS}")


def paired_bootstrap(
  metric: str,
  first: Sequence[str],
  second: Sequence[str],
  references: Sequence[str],
  *,
  samples: int = 200,
  seed: int = 0,
) -> dict[str, dict[str, float]]:
  """95% interval of score(second) - score(first) over resampled examples, per key.

  Both systems are scored on the same resample each time (a paired test): an interval
  that contains 0 means the two outputs are not distinguishable at this sample size.
  Returns {key: {"difference", "low", "high"}}.
  """
  _check(first, references)
  _check(second, references)
  rng = np.random.default_rng(seed)
  n = len(references)
  if metric == "rouge":
    a, b = rouge_per_example(first, references), rouge_per_example(second, references)
    scorer: Callable = lambda idx: {k: b[k][idx].mean() - a[k][idx].mean() for k in a}
  else:

    def scorer(idx):
      pick = lambda texts: [texts[i] for i in idx]
      refs = pick(references)
      return {"bleu": bleu(pick(second), refs)["bleu"] - bleu(pick(first), refs)["bleu"]}

  full = scorer(np.arange(n))
  draws = [scorer(rng.integers(0, n, n)) for _ in range(samples)]
  return {
    key: {
      "difference": float(full[key]),
      "low": float(np.percentile([d[key] for d in draws], 2.5)),
      "high": float(np.percentile([d[key] for d in draws], 97.5)),
    }
    for key in full
  }
