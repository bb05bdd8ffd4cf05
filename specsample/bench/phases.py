"""Where a speculative iteration's time goes: draft phase, verify phase, bookkeeping.

The speedup model charges an iteration gamma * t_draft(1) + t_target(gamma + 1) and a
plain step t_target(1), each step timed in a compiled loop of its own. `phase_breakdown`
measures what the decoding loops really pay, side by side in one run on the same prompts
(batch 1, each prompt alone, compilation excluded, repeats interleaved, medians):

  speculative      the speculative loop, end to end;
  model calls      a compiled loop making only the speculative loop's model calls: the
                   loop's own drafter (`decoding.drafters`) proposes, scores and advances
                   each iteration as the real run did, accepting the tokens the real run
                   accepted (its trace), without verification, commits or statistics;
  target calls     the same loop without the draft's calls (the target scores blocks of
                   the last token repeated);
  prefill          both models' `init_state` alone (encoders, cross-attention keys);
  autoregressive   generate, end to end, and its model calls alone.

Differences give the per-iteration cost of each phase:
  draft phase  = (model calls - target calls - draft prefill) / iterations
  verify phase = (target calls - target prefill) / iterations
  bookkeeping  = (speculative - model calls) / iterations  (sampling, verification,
                 commits, statistics, the while loop)
and the prefill is a per-prompt cost that the per-iteration model leaves out.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from specsample.bench.costs import clear_step_programs
from specsample.bench.timing import interleaved_medians, measured_speedup
from specsample.core import SamplingConfig
from specsample.core.contract import uses_target_features
from specsample.decoding import (
  SpeculativeSettings,
  clear_compiled_programs,
  generate,
  speculative_decode,
)
from specsample.decoding.drafters import Proposal, Verdict, make_drafter
from specsample.decoding.drafters.base import rewind_target


@dataclasses.dataclass(frozen=True)
class PhaseBreakdown:
  """Seconds summed over the prompts (batch 1, medians per prompt)."""

  gamma: int
  temperature: float
  rule: str
  iterations: int  # speculative iterations (target calls), all prompts
  tokens: int  # autoregressive steps (= tokens generated plainly), all prompts
  speculative_tokens: int  # tokens generated speculatively, all prompts
  speculative_seconds: float
  model_calls_seconds: float  # the speculative loop's model calls only (with prefills)
  target_calls_seconds: float  # the same without the draft's calls
  prefill_seconds: float  # both models' init_state
  target_prefill_seconds: float  # the target's init_state alone
  autoregressive_seconds: float
  autoregressive_calls_seconds: float  # generate's model calls only (with the prefill)

  @property
  def draft_per_iteration(self) -> float:
    draft_prefill = self.prefill_seconds - self.target_prefill_seconds
    return (self.model_calls_seconds - self.target_calls_seconds - draft_prefill) / self.iterations

  @property
  def verify_per_iteration(self) -> float:
    return (self.target_calls_seconds - self.target_prefill_seconds) / self.iterations

  @property
  def bookkeeping_per_iteration(self) -> float:
    return (self.speculative_seconds - self.model_calls_seconds) / self.iterations

  @property
  def step_per_token(self) -> float:
    """The autoregressive loop's target call per token."""
    return (self.autoregressive_calls_seconds - self.target_prefill_seconds) / self.tokens

  @property
  def autoregressive_bookkeeping_per_token(self) -> float:
    return (self.autoregressive_seconds - self.autoregressive_calls_seconds) / self.tokens

  @property
  def speedup(self) -> float:
    """Plain seconds per token / speculative seconds per token (measured_speedup)."""
    return measured_speedup(
      self.autoregressive_seconds, self.tokens, self.speculative_seconds, self.speculative_tokens
    )

  @property
  def speedup_without_prefill(self) -> float:
    """The per-iteration speedup the paper's formula describes: prefills taken out (NaN
    where timing noise leaves no time after the prefill, as on tiny models)."""
    if self.speculative_seconds <= self.prefill_seconds:
      return float("nan")
    return measured_speedup(
      self.autoregressive_seconds - self.target_prefill_seconds, self.tokens,
      self.speculative_seconds - self.prefill_seconds, self.speculative_tokens,
    )  # fmt: skip

  @property
  def tokens_per_iteration(self) -> float:
    """Tokens generated per target call (lookup, drafts and the target's own token)."""
    return self.speculative_tokens / self.iterations

  def predicted_without_prefill(self, draft_seconds: float, target_seconds: dict[int, float]):
    """The cost model's speedup at these runs' tokens per iteration:
    E[n + 1] t_target(1) / (gamma t_draft(1) + t_target(gamma + 1)), with the measured
    single-call times (target_seconds: k -> t_target(k)); NaN without t_target(gamma + 1)."""
    verify = target_seconds.get(self.gamma + 1)
    if verify is None:
      return float("nan")
    return self.tokens_per_iteration * target_seconds[1] / (self.gamma * draft_seconds + verify)

  def efficiency_without_prefill(self, draft_seconds: float, target_seconds: dict[int, float]):
    """The loop at its cost model: the speedup with both prefills taken out over
    `predicted_without_prefill`. 1 when the loop pays only the calls the model charges; the
    draft phase's excess (catch-up, lookup) and the bookkeeping take it below."""
    return self.speedup_without_prefill / self.predicted_without_prefill(
      draft_seconds, target_seconds
    )


def phase_breakdown(
  target,
  draft,
  rows: Sequence[tuple[np.ndarray, np.ndarray]],
  *,
  gamma: int,
  sampling: SamplingConfig,
  rule: str = "token",
  max_new_tokens: int,
  repeats: int = 5,
  seed: int = 0,
) -> PhaseBreakdown:
  """Times the phases of speculative and plain decoding on `rows` (batch-1 prompts:
  (int32[1, width], int32[1]) pairs, all of one width so that one program serves all)."""
  if not rows:
    raise ValueError("phase_breakdown needs at least one prompt")
  if repeats < 1:
    raise ValueError(f"repeats must be >= 1, got {repeats}")
  common = dict(max_new_tokens=max_new_tokens, sampling=sampling, seed=seed)
  spec_settings = SpeculativeSettings.of(
    gamma=gamma, max_new_tokens=max_new_tokens, sampling=sampling, verification=rule
  )
  traced = dataclasses.replace(spec_settings, record_trace=True)
  positions = max_new_tokens + gamma + 1  # the cache length the speculative loop allocates
  totals = dict.fromkeys(
    ("spec", "calls", "target_calls", "prefill", "target_prefill", "ar", "ar_calls"), 0.0
  )
  iterations = tokens = speculative_tokens = 0
  for index, (array, length) in enumerate(rows):
    array, length = jnp.asarray(array, jnp.int32), jnp.asarray(length, jnp.int32)
    if array.ndim != 2 or array.shape[0] != 1 or length.shape != (1,):
      raise ValueError(
        f"phase_breakdown takes batch-1 rows (int32[1, width], int32[1]), got shapes "
        f"{array.shape} and {length.shape}"
      )
    spec_out = speculative_decode(target, draft, array, traced, seed=seed, prompt_lengths=length)
    ar_out = generate(target, array, prompt_lengths=length, **common)
    n_iter = jnp.asarray(spec_out.stats.target_calls, jnp.int32)
    accepted = spec_out.trace.accepted  # int32[max_new_tokens, 1]: n of each iteration
    n_steps = jnp.asarray(ar_out.stats.target_calls, jnp.int32)
    iterations += int(n_iter)
    tokens += int(n_steps)
    speculative_tokens += int(spec_out.lengths[0])
    calls = {
      "spec": lambda a=array, n=length: (
        speculative_decode(target, draft, a, spec_settings, seed=seed, prompt_lengths=n).tokens
      ),
      "calls": lambda a=array, n=length, i=n_iter, acc=accepted: speculative_model_calls(
        target, draft, a, n, acc, i, settings=spec_settings, with_draft=True
      )[0],
      "target_calls": lambda a=array, n=length, i=n_iter, acc=accepted: speculative_model_calls(
        target, draft, a, n, acc, i, settings=spec_settings, with_draft=False
      )[0],
      "prefill": lambda a=array, n=length: _prefill(target, draft, a, n, positions=positions),
      "target_prefill": lambda a=array, n=length: _prefill(
        target, None, a, n, positions=max_new_tokens
      ),
      "ar": lambda a=array, n=length: generate(target, a, prompt_lengths=n, **common).tokens,
      "ar_calls": lambda a=array, n=length, s=n_steps: autoregressive_model_calls(
        target, a, n, s, positions=max_new_tokens
      ),
    }
    for seconds_per_call, name in zip(
      # One width for all rows: only the first row's calls compile (run once untimed).
      interleaved_medians(list(calls.values()), repeats=repeats, warmup=index == 0),
      calls,
      strict=True,
    ):
      totals[name] += seconds_per_call
  # These programs will not run again: release their memory (see decoding.programs).
  for program in (_prefill, speculative_model_calls, autoregressive_model_calls):
    program.clear_cache()
  clear_compiled_programs()
  clear_step_programs()
  return PhaseBreakdown(
    gamma=gamma,
    temperature=sampling.temperature,
    rule=rule,
    iterations=max(1, iterations),
    tokens=max(1, tokens),
    speculative_tokens=max(1, speculative_tokens),
    speculative_seconds=totals["spec"],
    model_calls_seconds=totals["calls"],
    target_calls_seconds=totals["target_calls"],
    prefill_seconds=totals["prefill"],
    target_prefill_seconds=totals["target_prefill"],
    autoregressive_seconds=totals["ar"],
    autoregressive_calls_seconds=totals["ar_calls"],
  )


def _argmax(logits: jax.Array) -> jax.Array:
  """[batch, vocab] -> int32[batch]: chains the next call on every logit of this one."""
  return jnp.argmax(logits, axis=-1).astype(jnp.int32)


@functools.partial(jax.jit, static_argnames=("positions",))
def _prefill(target, draft, prompts, lengths, *, positions: int):
  states = [target.init_state(prompts, lengths, positions)]
  if draft is not None:
    states.append(draft.init_state(prompts, lengths, positions))
  return states


@functools.partial(jax.jit, static_argnames=("settings", "with_draft"))
def speculative_model_calls(
  target, draft, prompts, lengths, accepted, iterations, *, settings, with_draft: bool
):
  """The speculative loop's model calls, `iterations` times, and nothing else, made by the
  loop's own drafter (`make_drafter(draft, settings)`, a chain): iteration i proposes,
  scores and advances with accepted[i] int32[batch] tokens accepted (the real run's trace),
  the next token chained by argmax of the target's logits. Without the draft
  (`with_draft` False) the target scores blocks of the last token repeated and rewinds.
  -> (the last token int32[batch], batched draft calls int32[], the target's end
  int32[batch])."""
  drafter = make_drafter(draft, settings)
  gamma = settings.gamma
  positions = drafter.cache_positions(settings.max_new_tokens)
  if with_draft:
    target_state, last, state = drafter.init(target, prompts, lengths, positions)
  elif uses_target_features(draft):  # the target's prefill alone, as the drafter makes it
    target_state, last, _ = target.init_state_with_features(prompts, lengths, positions)
    state = None
  else:
    (target_state, last), state = target.init_state(prompts, lengths, positions), None
  batch = prompts.shape[0]
  active = jnp.ones((batch,), bool)
  keys = jax.random.split(jax.random.key(0), settings.max_new_tokens)

  def iteration(i, carry):
    target_state, state, last, draft_calls = carry
    if with_draft:
      proposal = drafter.propose(state, active, keys[i])
    else:
      proposal = Proposal(
        tokens=jnp.repeat(last[:, None], gamma, axis=1), probs=None,
        bad=jnp.zeros((batch, gamma), bool), num_drafted=None, steps=0, model_state=None,
      )  # fmt: skip
    scored = drafter.score(target, target_state, last, proposal, active)
    n = jnp.minimum(accepted[i], gamma)  # [batch]
    at_n = jnp.take_along_axis(scored.logits, n[:, None, None], axis=1)[:, 0]  # [batch, vocab]
    y = _argmax(at_n)
    if with_draft:
      verdict = Verdict(
        n=n, y=y, path=proposal.tokens, num_drafted=jnp.full_like(n, gamma),
        target_bad=jnp.zeros_like(active), draft_bad=jnp.zeros_like(active),
      )  # fmt: skip
      target_state, state = drafter.advance(
        state, target, target_state, proposal, scored, verdict, active
      )
    else:
      target_state = rewind_target(target, scored.target_state, target_state.end_index, n, active)
    return target_state, state, y, draft_calls + proposal.steps

  carry = (target_state, state, last, jnp.zeros((), jnp.int32))
  target_state, _, last, draft_calls = jax.lax.fori_loop(0, iterations, iteration, carry)
  return last, draft_calls, target_state.end_index


@functools.partial(jax.jit, static_argnames=("positions",))
def autoregressive_model_calls(target, prompts, lengths, steps, *, positions: int):
  """Plain decoding's model calls, `steps` times, and nothing else."""
  state, token = target.init_state(prompts, lengths, positions)
  one = jnp.ones((prompts.shape[0],), jnp.int32)

  def step(_, carry):
    state, token = carry
    logits, state = target.extend(state, token[:, None], one)
    return state, _argmax(logits[:, 0])

  return jax.lax.fori_loop(0, steps, step, (state, token))[1]
