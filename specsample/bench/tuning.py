"""Choosing gamma for a target/draft pair on this machine (`gamma="auto"`).

The speedup model (core.speedup) needs three numbers:
  alpha   acceptance rate: the pair's known figure (`alpha=`, e.g. a bundled draft's
          held-out agreement with its target), or a short speculative probe run on at most
          PROBE_PROMPTS of the caller's prompts (a bounded sample, whatever the batch);
  c       t_draft(1) / t_target(1): one draft step over one target step;
  r(g+1)  t_target(g + 1) / t_target(1): verifying g draft tokens over one plain step.
c and r are timed on this machine at the batch's size: once per machine, pair and batch
size when the caller names the pair (`pair_id`: bench.calibration keeps them in the user's
cache directory), else on the probe's prompts each time. The chosen gamma maximises
E[n + 1] / (gamma * c + r(gamma + 1)); speculation is used only where that prediction
clears a margin for what the model leaves out (`min_predicted_speedup`).

On a CPU a batch of more than MAX_WEIGHED_ROWS_CPU rows is not weighed: it decodes
plainly, without a probe or a calibration. There a verify call's rows cost nearly what as
many plain steps cost (SmolLM2 at 200 rows on a 2-core AVX2 EPYC: r(2) 1.54, the best
gamma predicted at 0.95x, after 1,000 s of calibration at that size: docs/usage.md).
"""

from __future__ import annotations

import dataclasses
import math

import jax
import numpy as np

from specsample.bench.calibration import MAX_GAMMA, Costs, calibrated_costs
from specsample.bench.costs import interleaved_step_seconds
from specsample.core.sampling import SamplingConfig
from specsample.core.speedup import best_gamma, theoretical_speedup
from specsample.decoding import SpeculativeSettings, speculative_decode
from specsample.decoding.inputs import check_positive_int, model_prompts

PROBE_GAMMA = 4  # gamma of the alpha probe run
PROBE_NEW_TOKENS = 32  # tokens per row of the alpha probe run (at most)
PROBE_PROMPTS = 4  # prompts of the alpha probe run (at most, spread over the batch)
# Speculate only where the model predicts at least this speedup. In batches the loop
# delivers about 0.7 of the model's prediction (SmolLM2 with its draft, 4 mixed prompts:
# predicted 1.25x, measured 0.87x), so a batch needs 1.4x; one prompt at a time it delivers
# 0.85-0.9 (docs/benchmarks.md, "efficiency"; docs/smollm2.md), so 1.15x.
MIN_PREDICTED_SPEEDUP = 1.4
MIN_PREDICTED_SPEEDUP_ONE_ROW = 1.15
MAX_WEIGHED_ROWS_CPU = 8  # larger batches decode plainly on a CPU, unmeasured


def min_predicted_speedup(batch: int) -> float:
  """The margin a batch of this size needs (MIN_PREDICTED_SPEEDUP[_ONE_ROW])."""
  return MIN_PREDICTED_SPEEDUP_ONE_ROW if batch == 1 else MIN_PREDICTED_SPEEDUP


@dataclasses.dataclass(frozen=True)
class GammaChoice:
  """The inputs of the speedup model and the gamma it prefers."""

  gamma: int
  alpha: float  # the pair's known figure, or measured by a probe run (gamma PROBE_GAMMA)
  c: float
  r: dict[int, float]  # gamma -> t_target(gamma + 1) / t_target(1)
  predicted_speedup: dict[int, float]  # gamma -> E[n + 1] / (gamma c + r)
  threshold: float = MIN_PREDICTED_SPEEDUP  # the margin speculation must clear
  alpha_source: str = "probe"  # "known" (given) or "probe on N prompts"
  costs_source: str = "measured now"  # or "kept from <date>" (bench.calibration)
  not_weighed: str = ""  # why nothing was measured (then speculation does not pay)

  @property
  def pays(self) -> bool:
    """Whether speculating is predicted to beat plain decoding by the margin the loop's
    overhead leaves (`threshold` at the chosen gamma)."""
    return not self.not_weighed and self.predicted_speedup[self.gamma] >= self.threshold

  def decide(self, *, must_speculate: bool = False) -> int | None:
    """The "auto" policy of the API and the CLI alike: the gamma to speculate with, or
    None to decode plainly where speculation does not pay, unless the run `must_speculate`
    (it asks for what plain decoding has not: a trace, a tree, adaptive drafting)."""
    return self.gamma if self.pays or must_speculate else None

  def why_plain(self) -> str:
    """One line: why plain decoding is chosen (when speculation does not pay)."""
    if self.not_weighed:
      return f"decoding plainly: {self.not_weighed}"
    return (
      f"speculation is not predicted to pay here (best gamma {self.gamma}: "
      f"{self.predicted_speedup[self.gamma]:.2f}x, below {self.threshold:.2f}x): "
      "decoding plainly"
    )

  def summary(self) -> str:
    """One line: the choice and the figures it came from."""
    if self.not_weighed:
      return f"gamma auto -> {self.gamma}, not weighed: {self.not_weighed}"
    predicted = ", ".join(f"{g}: {s:.2f}x" for g, s in self.predicted_speedup.items())
    return (
      f"gamma auto -> {self.gamma} (alpha {self.alpha:.2f} {self.alpha_source}, c {self.c:.3f}, "
      f"r({self.gamma + 1}) {self.r[self.gamma]:.2f}, costs {self.costs_source}; predicted "
      f"speedup by gamma {predicted}; speculating needs {self.threshold:.2f}x)"
    )


def choose_gamma(
  alpha: float, costs: Costs, *, batch: int, max_gamma: int = MAX_GAMMA, **sources
) -> GammaChoice:
  """The gamma the speedup model prefers for `alpha` and the measured costs (gammas
  1..max_gamma), with the margin for `batch` rows."""
  r = {g: costs.r[g] for g in range(1, max_gamma + 1) if g in costs.r}
  predicted = {g: theoretical_speedup(alpha, g, costs.c, r[g]) for g in r}
  return GammaChoice(
    gamma=best_gamma(alpha, costs.c, r, max_gamma=max_gamma),
    alpha=alpha,
    c=costs.c,
    r=r,
    predicted_speedup=predicted,
    threshold=min_predicted_speedup(batch),
    **sources,
  )


def probe_alpha(
  target, draft, padded, lengths, *, sampling, verification, seed
) -> tuple[float, int]:
  """(alpha, prompts probed): a short speculative run (PROBE_GAMMA, PROBE_NEW_TOKENS) on
  at most PROBE_PROMPTS rows spread over the batch."""
  batch = padded.shape[0]
  rows = np.unique(np.linspace(0, batch - 1, min(batch, PROBE_PROMPTS)).round().astype(int))
  width = int(np.max(np.asarray(lengths)[rows]))
  settings = SpeculativeSettings.of(
    gamma=PROBE_GAMMA,
    max_new_tokens=PROBE_NEW_TOKENS,
    sampling=sampling,
    verification=verification,
  )
  probe = speculative_decode(
    target, draft, padded[rows, :width], settings, seed=seed, prompt_lengths=lengths[rows]
  )
  alpha = probe.stats.alpha
  return (0.0 if alpha != alpha else float(alpha)), len(rows)  # NaN: nothing was verified


def tune_gamma(
  target,
  draft,
  prompts,
  *,
  sampling: SamplingConfig | None = None,
  verification="token",
  max_gamma: int = MAX_GAMMA,
  prompt_lengths=None,
  seed=0,
  repeats: int = 10,
  alpha: float | None = None,
  pair_id: str | None = None,
  recalibrate: bool = False,
) -> GammaChoice:
  """Picks the best gamma for `prompts` (their batch size) on this machine.

  alpha: the pair's known acceptance rate (None: a probe run on at most PROBE_PROMPTS of
  the prompts). pair_id: names the pair so that c and r are measured once per machine and
  batch size and kept (bench.calibration; `recalibrate` measures them again); None: they
  are measured now on the prompts (`repeats` rounds). Call it once per pair and batch
  size and pass the returned `gamma` on (`gamma="auto"` in `speculative_generate` calls it
  every time).
  """
  max_gamma = check_positive_int("max_gamma", max_gamma)
  padded, lengths = model_prompts(target, prompts, prompt_lengths)
  batch = padded.shape[0]
  if batch > MAX_WEIGHED_ROWS_CPU and jax.default_backend() == "cpu":
    why = (
      f"{batch} rows, and gamma auto weighs speculation for at most {MAX_WEIGHED_ROWS_CPU} "
      "rows on a CPU (larger batches make verify calls as dear as plain steps; "
      "--gamma N speculates anyway)"
    )
    return GammaChoice(PROBE_GAMMA, math.nan, math.nan, {}, {}, not_weighed=why)
  if alpha is None:
    alpha, probed = probe_alpha(
      target, draft, padded, lengths, sampling=sampling, verification=verification, seed=seed
    )
    alpha_source = f"from a probe of {probed} prompt{'s' * (probed > 1)}"
  else:
    if not 0.0 <= alpha <= 1.0:
      raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    alpha_source = "known for this pair"
  if pair_id is not None:
    costs, kept = calibrated_costs(
      target, draft, pair_id=pair_id, batch=batch, recalibrate=recalibrate, max_gamma=max_gamma
    )
    costs_source = f"kept from {costs.measured}" if kept else "measured now and kept"
  else:
    costs = _costs_on(target, draft, padded, lengths, max_gamma=max_gamma, repeats=repeats)
    costs_source = "measured now"
  return choose_gamma(
    alpha, costs, batch=batch, max_gamma=max_gamma,
    alpha_source=alpha_source, costs_source=costs_source,
  )  # fmt: skip


def _costs_on(target, draft, padded, lengths, *, max_gamma: int, repeats: int) -> Costs:
  """c and r timed on the caller's prompts."""
  gammas = range(1, max_gamma + 1)
  one, draft_one, *verify = interleaved_step_seconds(
    [(target, 1), (draft, 1), *((target, g + 1) for g in gammas)],
    padded,
    prompt_lengths=lengths,
    repeats=repeats,
  )
  return Costs(
    c=draft_one / one,
    r={g: seconds / one for g, seconds in zip(gammas, verify, strict=True)},
    target_step_ms=1e3 * one,
    measured="now",
    seconds=0.0,
  )
