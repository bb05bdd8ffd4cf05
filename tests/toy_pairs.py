"""Markov toy pairs, batched prompt groups and the exact-distribution checks built on them."""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import numpy as np
from distribution_check import fit

from specsample import SamplingConfig, generate, speculative_generate
from specsample.models import MarkovLM

PROMPTS = ([2], [0, 3], [5, 1, 4])  # three prompt groups of different lengths
# Prompts whose n-grams recur, where prompt lookup has something to propose.
REPEATING_PROMPTS = ([2, 3, 2], [0, 3], [4, 1, 3, 4])


def make_pair(seed: int, vocab: int, order: int = 1, eos_id: int | None = None, noise: float = 1.0):
  """A random target and a draft that is a noisy copy of it (alpha well inside (0, 1))."""
  target = MarkovLM.random(seed, vocab, order=order, scale=1.5, eos_id=eos_id)
  noise_table = jax.random.normal(jax.random.key(seed + 1000), target.logits_table.shape)
  draft = dataclasses.replace(target, logits_table=target.logits_table + noise * noise_table)
  return target, draft


def toy_pair() -> tuple[MarkovLM, MarkovLM]:
  """A target over 7 tokens (EOS 6) and a draft whose logits add another random table's."""
  target = MarkovLM.random(0, 7, scale=2.0, eos_id=6)
  noise = MarkovLM.random(1, 7, scale=0.8).logits_table
  return target, MarkovLM(target.logits_table + noise, eos_id=6)


def batched_prompts(rows_per_prompt: int, prompts=PROMPTS) -> list[list[int]]:
  """rows_per_prompt rows of each prompt, the groups interleaved (row i has prompt i % n)."""
  return [list(prompts[i % len(prompts)]) for i in range(rows_per_prompt * len(prompts))]


def fits_per_prompt(
  target, tokens: np.ndarray, max_new_tokens: int, sampling: SamplingConfig, prompts=PROMPTS
):
  """The fit of each prompt group's rows of `tokens` (from batched_prompts(..., prompts))
  against the target's exact distribution of whole sequences after that prompt."""
  fits = []
  for group, prompt in enumerate(prompts):
    exact = target.exact_distribution(prompt, max_new_tokens, sampling)
    fits.append(fit(tokens[group :: len(prompts)], exact))
  return fits


def assert_every_prompt_fits(
  target, out, max_new_tokens: int, sampling: SamplingConfig, prompts=PROMPTS
) -> None:
  """Every prompt group of a batched_prompts(..., prompts) call's output follows the
  target's exact distribution (see distribution_check.Fit.ok)."""
  fits = fits_per_prompt(target, np.asarray(out.tokens), max_new_tokens, sampling, prompts)
  for prompt, result in zip(prompts, fits):
    assert result.ok, f"prompt {prompt}: {result}"


def assert_no_prompt_fits(target, out, max_new_tokens: int, sampling: SamplingConfig) -> None:
  """No prompt group of a batched_prompts(...) call's output follows the target's exact
  distribution, each far from it (p-values below 1e-6): what a wrong rule must give."""
  fits = fits_per_prompt(target, np.asarray(out.tokens), max_new_tokens, sampling)
  assert not any(result.ok for result in fits), fits
  assert max(result.p_value for result in fits) < 1e-6, fits


def assert_speculative_samples_fit(
  target, draft, sampling: SamplingConfig, rows_per_prompt: int, prompts=PROMPTS, **options
):
  """Speculative decoding of batched_prompts(rows_per_prompt, prompts) in ONE call (options:
  gamma, max_new_tokens, seed, ...) follows the target's exact distribution after every
  prompt; returns the output."""
  batch = batched_prompts(rows_per_prompt, prompts)
  out = speculative_generate(target, draft, batch, sampling=sampling, **options)
  assert_every_prompt_fits(target, out, options["max_new_tokens"], sampling, prompts)
  return out


def speculative_samples(
  pair_seed: int,
  rows_per_prompt: int,
  *,
  order: int = 1,
  eos_id: int | None = None,
  temperature: float = 1.0,
  top_k: int = 0,
  top_p: float = 1.0,
  **options,
):
  """(target, sampling, out): speculative decoding of make_pair(pair_seed, vocab=6, order,
  eos_id) in ONE batched call over batched_prompts(rows_per_prompt), sampling with
  (temperature, top_k, top_p); `options` (gamma, max_new_tokens, seed, verification,
  adaptive, tree, ...) go to speculative_generate."""
  target, draft = make_pair(seed=pair_seed, vocab=6, order=order, eos_id=eos_id)
  sampling = SamplingConfig(temperature=temperature, top_k=top_k, top_p=top_p)
  prompts = batched_prompts(rows_per_prompt)
  out = speculative_generate(target, draft, prompts, sampling=sampling, **options)
  return target, sampling, out


class SamplingCase(NamedTuple):
  """A sequence-level test's case: the sampling (temperature, top_k, top_p), gamma and
  max_new_tokens, and the order and EOS of the toy pair the samples come from."""

  temperature: float
  top_k: int
  top_p: float
  gamma: int
  max_new_tokens: int
  order: int
  eos_id: int | None

  def samples(self, rows_per_prompt: int, *, seed: int, pair_seed_offset: int = 0, **options):
    """`speculative_samples` of this case, the pair seeded gamma + 10 * order +
    pair_seed_offset; `options` (verification, adaptive, tree, ...) go to
    speculative_generate. -> (target, sampling, out)"""
    return speculative_samples(
      self.gamma + 10 * self.order + pair_seed_offset, rows_per_prompt, order=self.order,
      eos_id=self.eos_id, temperature=self.temperature, top_k=self.top_k, top_p=self.top_p,
      gamma=self.gamma, max_new_tokens=self.max_new_tokens, seed=seed, **options,
    )  # fmt: skip


def speculative_greedy_equals_plain(target, draft, prompts, gammas, max_new_tokens: int, **options):
  """Speculative greedy output with each gamma (`options`: tree, adaptive, trace, ... for
  speculative_generate) equals the target's plain greedy output; returns the last
  speculative call's output."""
  greedy = SamplingConfig(temperature=0.0)
  plain = generate(target, prompts, max_new_tokens=max_new_tokens, sampling=greedy)
  for gamma in gammas:
    spec = speculative_generate(
      target, draft, prompts, gamma=gamma, max_new_tokens=max_new_tokens, sampling=greedy, **options
    )
    assert spec.sequences() == plain.sequences()
  return spec
