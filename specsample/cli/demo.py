"""`specsample demo`: speculative sampling on a toy Markov pair, checked against exact
distributions (no downloads, a few seconds on a CPU)."""

from __future__ import annotations

import dataclasses
import math
import time

import jax
import numpy as np

from specsample.api import speculative_generate
from specsample.bench import sequence_fit
from specsample.core import SamplingConfig, expected_tokens_per_iteration
from specsample.decoding import generate
from specsample.decoding.settings import MAX_GAMMA
from specsample.models import MarkovLM

MIN_VOCAB, MAX_VOCAB = 4, 64
MAX_OUTCOMES = 10**6  # sequences the exact distribution enumerates (in Python)
MAX_SAMPLES = 10**6


@dataclasses.dataclass(frozen=True)
class DemoSettings:
  vocab_size: int = 6
  gamma: int = 4
  verification: str = "token"
  temperature: float = 1.0
  max_new_tokens: int = 3
  samples: int = 20_000
  draft_noise: float = 1.0
  seed: int = 0

  def __post_init__(self):
    """One-line errors for what the demo cannot run: the toy target's table holds
    vocab_size**3 logits and the exact distribution vocab_size**max_new_tokens outcomes."""
    if not MIN_VOCAB <= self.vocab_size <= MAX_VOCAB:
      raise ValueError(
        f"--vocab-size must be in {MIN_VOCAB}..{MAX_VOCAB} (the prompt is tokens 2, 3 and "
        f"token 1 ends a sequence), got {self.vocab_size}"
      )
    if self.gamma < 1:
      raise ValueError(f"--gamma must be >= 1, got {self.gamma}")
    if self.gamma > MAX_GAMMA:
      raise ValueError(f"--gamma must be <= {MAX_GAMMA}, got {self.gamma}")
    if not (math.isfinite(self.temperature) and self.temperature > 0):
      raise ValueError(f"--temperature must be > 0 for the sampling part, got {self.temperature}")
    SamplingConfig(temperature=self.temperature)
    if self.max_new_tokens < 1 or self.vocab_size**self.max_new_tokens > MAX_OUTCOMES:
      raise ValueError(
        f"--max-new-tokens {self.max_new_tokens} with --vocab-size {self.vocab_size}: the exact "
        f"distribution would enumerate vocab_size**max_new_tokens > {MAX_OUTCOMES:,} outcomes"
      )
    if not 1 <= self.samples <= MAX_SAMPLES:
      raise ValueError(f"--samples must be in 1..{MAX_SAMPLES:,}, got {self.samples}")
    if not (math.isfinite(self.draft_noise) and self.draft_noise >= 0):
      raise ValueError(f"--draft-noise must be a finite number >= 0, got {self.draft_noise}")


def toy_pair(settings: DemoSettings) -> tuple[MarkovLM, MarkovLM]:
  """A random second-order target, and a draft that is a noisy copy of it."""
  target = MarkovLM.random(settings.seed, settings.vocab_size, order=2, scale=1.5, eos_id=1)
  noise = jax.random.normal(jax.random.key(settings.seed + 1), target.logits_table.shape)
  draft = dataclasses.replace(
    target, logits_table=target.logits_table + settings.draft_noise * noise
  )
  return target, draft


def run_demo(settings: DemoSettings) -> dict[str, float]:
  """Runs the demo, prints a report, and returns its numbers."""
  target, draft = toy_pair(settings)
  prompt = [2, 3]
  print(
    f"specsample demo: second-order Markov target over {settings.vocab_size} tokens, draft = "
    f"target + noise (sd {settings.draft_noise}), gamma = {settings.gamma}, "
    f"{settings.verification}-wise verification"
  )

  # Greedy: token-for-token equality with plain greedy decoding of the target.
  greedy = SamplingConfig(temperature=0.0)
  prompts = [[i % settings.vocab_size, (3 * i + 1) % settings.vocab_size] for i in range(16)]
  plain = generate(target, prompts, max_new_tokens=20, sampling=greedy)
  spec = speculative_generate(
    target, draft, prompts, gamma=settings.gamma, max_new_tokens=20, sampling=greedy
  )
  same = np.array_equal(np.asarray(plain.tokens), np.asarray(spec.tokens))
  print(f"  greedy, 16 prompts x 20 tokens: speculative == autoregressive: {same}")

  # Sampling: many rows of one prompt in one batched call.
  sampling = SamplingConfig(temperature=settings.temperature)
  start = time.perf_counter()
  out = speculative_generate(
    target,
    draft,
    [prompt] * settings.samples,
    gamma=settings.gamma,
    max_new_tokens=settings.max_new_tokens,
    sampling=sampling,
    verification=settings.verification,
    seed=settings.seed,
    trace=True,
  )
  seconds = time.perf_counter() - start
  # The rule against its theory: every verdict, also past the few tokens each sample
  # keeps (out.stats counts only the kept tokens, and nearly every iteration here is cut).
  verdicts = np.asarray(out.trace.accepted)[np.asarray(out.trace.active)]
  alpha = verdicts.sum() / (verdicts.sum() + np.sum(verdicts < settings.gamma))
  tokens_per_call = 1.0 + verdicts.mean()
  theory = expected_tokens_per_iteration(alpha, settings.gamma)
  print(
    f"  sampled {settings.samples} sequences of {settings.max_new_tokens} tokens at "
    f"temperature {settings.temperature} in {seconds:.2f} s (compilation included)"
  )
  print(
    f"  alpha = {alpha:.3f}; tokens per target call = {tokens_per_call:.3f} "
    f"(theory for token-wise at this alpha: {theory:.3f})"
  )
  histogram = np.bincount(verdicts, minlength=settings.gamma + 1)
  print(f"  accepted draft tokens per iteration, histogram over 0..gamma: {histogram.tolist()}")

  # Exactness: whole sequences against the exact target distribution, and the draft's.
  exact = target.exact_distribution(prompt, settings.max_new_tokens, sampling)
  spec_fit = sequence_fit(np.asarray(out.tokens), exact)
  draft_only = generate(
    draft,
    [prompt] * settings.samples,
    max_new_tokens=settings.max_new_tokens,
    sampling=sampling,
    seed=settings.seed,
  )
  draft_fit = sequence_fit(np.asarray(draft_only.tokens), exact)
  print(
    f"  total variation from the exact target distribution: speculative "
    f"{spec_fit.total_variation:.4f}, draft alone {draft_fit.total_variation:.4f} "
    f"(sampling noise alone: ~{spec_fit.noise_total_variation:.4f})"
  )
  return {
    "greedy_equal": float(same),
    "alpha": float(alpha),
    "tokens_per_target_call": float(tokens_per_call),
    "speculative_tv": spec_fit.total_variation,
    "draft_tv": draft_fit.total_variation,
    "noise_tv": spec_fit.noise_total_variation,
  }
