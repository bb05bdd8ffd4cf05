"""BLEU of a translation model and alpha / c of a target-draft pair on a test set."""

from __future__ import annotations

from collections.abc import Sequence

import jax.numpy as jnp

from specsample.bench import cost_ratio, verify_cost_ratios
from specsample.core import SamplingConfig, best_gamma
from specsample.decoding import SpeculativeSettings, generate, speculative_decode


def translate_all(
  model, vocab, texts: Sequence[str], *, prefix: str, max_new_tokens: int = 48, batch: int = 128
) -> list[str]:
  """Greedy translations of `texts` (batched)."""
  outputs = []
  for start in range(0, len(texts), batch):
    prompts = [vocab.encode(prefix + text) for text in texts[start : start + batch]]
    out = generate(model, prompts, max_new_tokens=max_new_tokens, sampling=SamplingConfig(0.0))
    outputs += [vocab.decode(sequence) for sequence in out.sequences()]
  return outputs


def evaluate_pair(
  target,
  draft,
  vocab,
  pairs: Sequence[tuple[str, str]],
  *,
  prefix: str,
  gamma: int = 4,
  max_new_tokens: int = 48,
) -> dict:
  """BLEU of each model alone, alpha and tokens per target call of the pair, and c."""
  import sacrebleu

  sources, references = [s for s, _ in pairs], [[r for _, r in pairs]]
  metrics: dict = {"test_pairs": len(pairs), "gamma": gamma}
  for name, model in (("target", target), ("draft", draft)):
    hypotheses = translate_all(model, vocab, sources, prefix=prefix, max_new_tokens=max_new_tokens)
    metrics[f"{name}_bleu"] = round(sacrebleu.corpus_bleu(hypotheses, references).score, 2)
    metrics[f"{name}_parameters"] = model.config.num_parameters
  prompts = [vocab.encode(prefix + text) for text in sources]
  for temperature in (0.0, 1.0):
    settings = SpeculativeSettings.of(
      gamma=gamma, max_new_tokens=max_new_tokens, sampling=SamplingConfig(temperature=temperature)
    )
    out = speculative_decode(target, draft, prompts, settings, seed=0)
    metrics[f"alpha_t{temperature:g}"] = round(out.stats.alpha, 3)
    metrics[f"tokens_per_target_call_t{temperature:g}"] = round(out.stats.tokens_per_target_call, 3)
  one_prompt = jnp.asarray([prompts[0]])
  metrics["c"] = round(cost_ratio(draft, target, one_prompt), 3)
  ratios = verify_cost_ratios(target, one_prompt, range(1, 9))
  metrics["r"] = {g: round(r, 3) for g, r in ratios.items()}
  # The gamma the speedup model prefers for this pair on this machine (greedy alpha).
  metrics["recommended_gamma"] = best_gamma(metrics["alpha_t0"], metrics["c"], ratios, max_gamma=8)
  return metrics
