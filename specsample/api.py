"""The public entry points, with `gamma="auto"` resolved above the decoding loops.

`speculative_generate` here is `specsample.decoding.speculative_generate` plus one
convenience: `gamma="auto"` measures alpha, c and r on the caller's prompts on this machine
(`specsample.bench.tune_gamma`) and decodes with the gamma the speedup model prefers. The
loops themselves never time anything.
"""

from __future__ import annotations

import jax

from specsample.bench.tuning import tune_gamma
from specsample.core.sampling import SamplingConfig
from specsample.core.verification import VerificationRule
from specsample.decoding import AdaptiveDraft, DraftTree, GenerationOutput
from specsample.decoding import speculative_generate as _speculative_generate
from specsample.decoding.inputs import check_sampling


def speculative_generate(
  target,
  draft,
  prompts,
  *,
  gamma: int | str = 4,
  max_new_tokens: int,
  sampling: SamplingConfig | None = None,
  verification: str | VerificationRule = "token",
  seed: int | jax.Array = 0,
  prompt_lengths=None,
  trace: bool = False,
  adaptive: AdaptiveDraft | bool | None = None,
  tree: DraftTree | int | None = None,
) -> GenerationOutput:
  """Speculative sampling: the output is distributed exactly as `generate(target, ...)`.

  Every argument is that of `specsample.decoding.speculative_generate` (see there), and
  gamma may also be "auto": measure alpha, c and r on these prompts and take the gamma
  the speedup model prefers (`specsample.bench.tune_gamma`). That costs a probe run and
  a few compilations per call: when decoding many batches, tune once and pass the
  number. The gamma used is `output.stats.gamma`.
  """
  if isinstance(gamma, str):
    if gamma != "auto":
      raise ValueError(f'gamma must be a positive int or "auto", got {gamma!r}')
    gamma = tune_gamma(
      target,
      draft,
      prompts,
      sampling=check_sampling(sampling),
      verification=verification,
      prompt_lengths=prompt_lengths,
      seed=seed,
    ).gamma
  return _speculative_generate(
    target,
    draft,
    prompts,
    gamma=gamma,
    max_new_tokens=max_new_tokens,
    sampling=sampling,
    verification=verification,
    seed=seed,
    prompt_lengths=prompt_lengths,
    trace=trace,
    adaptive=adaptive,
    tree=tree,
  )
