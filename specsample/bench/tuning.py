"""Choosing gamma for a target/draft pair on this machine (`gamma="auto"`).

The speedup model (core.speedup) needs three numbers, all measured here on the caller's
prompts and batch size:
  alpha   acceptance rate, from a short speculative probe run;
  c       t_draft(1) / t_target(1): one draft step over one target step;
  r(g+1)  t_target(g + 1) / t_target(1): verifying g draft tokens over one plain step.
The chosen gamma maximises E[n + 1] / (gamma * c + r(gamma + 1)).
"""

from __future__ import annotations

import dataclasses

from specsample.bench.costs import interleaved_step_seconds
from specsample.core.contract import prompt_pad_id
from specsample.core.sampling import SamplingConfig
from specsample.core.speedup import best_gamma, theoretical_speedup
from specsample.decoding import SpeculativeSettings, speculative_decode
from specsample.decoding.inputs import check_positive_int, prepare_prompts

PROBE_GAMMA = 4  # gamma of the alpha probe run
PROBE_NEW_TOKENS = 32  # tokens per row of the alpha probe run (at most)
# Speculate only where the model predicts at least this speedup: the loop delivers 0.75-0.9
# of the model's prediction at batch 1 (sampling, verification, commits; docs/benchmarks.md,
# "efficiency") and less in batches (SmolLM2 with its draft, 4 mixed prompts: predicted
# 1.25x, measured 0.87x), so a predicted 1.25x can measure below plain decoding.
MIN_PREDICTED_SPEEDUP = 1.4


@dataclasses.dataclass(frozen=True)
class GammaChoice:
  """The measured inputs of the speedup model and the gamma it prefers."""

  gamma: int
  alpha: float  # measured by a probe run with gamma PROBE_GAMMA
  c: float
  r: dict[int, float]  # gamma -> t_target(gamma + 1) / t_target(1)
  predicted_speedup: dict[int, float]  # gamma -> E[n + 1] / (gamma c + r)

  @property
  def pays(self) -> bool:
    """Whether speculating is predicted to beat plain decoding by a margin the loop's
    overhead leaves (MIN_PREDICTED_SPEEDUP at the chosen gamma)."""
    return self.predicted_speedup[self.gamma] >= MIN_PREDICTED_SPEEDUP


def tune_gamma(
  target,
  draft,
  prompts,
  *,
  sampling: SamplingConfig | None = None,
  verification="token",
  max_gamma: int = 8,
  prompt_lengths=None,
  seed=0,
  repeats: int = 10,
) -> GammaChoice:
  """Measures alpha, c and r on `prompts` (same batch size) and picks the best gamma.

  Costs one probe decode and max_gamma + 2 small compilations; call it once per pair,
  machine and batch size and pass the returned `gamma` on (`gamma="auto"` in
  `speculative_generate` calls this every time).
  """
  max_gamma = check_positive_int("max_gamma", max_gamma)
  padded, lengths = prepare_prompts(
    prompts,
    prompt_lengths,
    vocab_size=target.vocab_size,
    pad_id=target.pad_id,
    prompt_pad_id=prompt_pad_id(target),
  )
  probe_settings = SpeculativeSettings.of(
    gamma=PROBE_GAMMA,
    max_new_tokens=PROBE_NEW_TOKENS,
    sampling=sampling,
    verification=verification,
  )
  probe = speculative_decode(
    target, draft, padded, probe_settings, seed=seed, prompt_lengths=lengths
  )
  alpha = probe.stats.alpha
  if alpha != alpha:  # NaN: nothing was verified (every row ended at once)
    alpha = 0.0

  gammas = range(1, max_gamma + 1)
  one, draft_one, *verify = interleaved_step_seconds(
    [(target, 1), (draft, 1), *((target, g + 1) for g in gammas)],
    padded,
    prompt_lengths=lengths,
    repeats=repeats,
  )
  c = draft_one / one
  r = {g: seconds / one for g, seconds in zip(gammas, verify, strict=True)}
  predicted = {g: theoretical_speedup(alpha, g, c, r[g]) for g in r}
  return GammaChoice(
    gamma=best_gamma(alpha, c, r, max_gamma=max_gamma),
    alpha=alpha,
    c=c,
    r=r,
    predicted_speedup=predicted,
  )
