"""Where a speculative iteration's time goes: draft phase, verify phase, bookkeeping.

The speedup model charges an iteration gamma * t_draft(1) + t_target(gamma + 1) and a
plain step t_target(1), each step timed in a compiled loop of its own. `phase_breakdown`
measures what the decoding loops really pay, side by side in one run on the same prompts
(batch 1, each prompt alone, compilation excluded, repeats interleaved, medians):

  speculative      the speculative loop, end to end;
  model calls      a compiled loop making only the speculative loop's model calls, with
                   the same shapes, the same number of iterations and both prefills (the
                   draft's catch-up, over 2 tokens as often as the loop needed it, and
                   gamma - 1 single steps, the target's (gamma + 1)-token call, two
                   rewinds): tokens are chained by argmax;
  target calls     the same loop without the draft's calls;
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
from specsample.bench.timing import interleaved_medians
from specsample.core import SamplingConfig
from specsample.core.contract import uses_target_features
from specsample.decoding import (
  SpeculativeSettings,
  clear_compiled_programs,
  generate,
  speculative_decode,
)


@dataclasses.dataclass(frozen=True)
class PhaseBreakdown:
  """Seconds summed over the prompts (batch 1, medians per prompt)."""

  gamma: int
  temperature: float
  rule: str
  iterations: int  # speculative iterations (target calls), all prompts
  tokens: int  # autoregressive steps, all prompts
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
    return self.autoregressive_seconds / self.speculative_seconds

  @property
  def speedup_without_prefill(self) -> float:
    """The per-iteration speedup the paper's formula describes: prefills taken out."""
    return (self.autoregressive_seconds - self.target_prefill_seconds) / (
      self.speculative_seconds - self.prefill_seconds
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
  positions = max_new_tokens + gamma + 1  # the cache length the speculative loop allocates
  totals = dict.fromkeys(
    ("spec", "calls", "target_calls", "prefill", "target_prefill", "ar", "ar_calls"), 0.0
  )
  iterations = tokens = 0
  for index, (array, length) in enumerate(rows):
    array, length = jnp.asarray(array, jnp.int32), jnp.asarray(length, jnp.int32)
    if array.ndim != 2 or array.shape[0] != 1 or length.shape != (1,):
      raise ValueError(
        f"phase_breakdown takes batch-1 rows (int32[1, width], int32[1]), got shapes "
        f"{array.shape} and {length.shape}"
      )
    spec_out = speculative_decode(
      target, draft, array, spec_settings, seed=seed, prompt_lengths=length
    )
    ar_out = generate(target, array, prompt_lengths=length, **common)
    n_iter = jnp.asarray(spec_out.stats.target_calls, jnp.int32)
    widths = catch_up_widths(draft, spec_out.stats.accepted_histogram, max_new_tokens)
    n_steps = jnp.asarray(ar_out.stats.target_calls, jnp.int32)
    iterations += int(n_iter)
    tokens += int(n_steps)
    calls = {
      "spec": lambda a=array, n=length: (
        speculative_decode(target, draft, a, spec_settings, seed=seed, prompt_lengths=n).tokens
      ),
      "calls": lambda a=array, n=length, i=n_iter, w=widths: speculative_model_calls(
        target, draft, a, n, i, w, gamma=gamma, positions=positions, with_draft=True
      ),
      "target_calls": lambda a=array, n=length, i=n_iter, w=widths: speculative_model_calls(
        target, draft, a, n, i, w, gamma=gamma, positions=positions, with_draft=False
      ),
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


def catch_up_widths(draft, accepted_histogram, max_new_tokens: int) -> jax.Array:
  """How wide each iteration's catch-up call was, from the histogram of accepted tokens
  per iteration (order does not matter for timing): a token-level draft owes 2 tokens
  after a block accepted whole, else 1; a feature draft owes n + 1. -> int32[max_new_tokens]
  (each iteration commits >= 1 token; past the iterations: padding)."""
  counts = np.asarray(accepted_histogram, np.int64)  # [gamma + 1]: iterations with n = i
  gamma, iterations = len(counts) - 1, int(counts.sum())
  # The first catch-up follows the prompt (1 token); each later one follows an iteration.
  if uses_target_features(draft):
    widths = np.concatenate([[1], np.repeat(np.arange(1, gamma + 2), counts)[: iterations - 1]])
  else:
    two = min(int(counts[gamma]), iterations - 1)
    widths = np.repeat([2, 1], [two, iterations - two])
  padded = np.ones(max_new_tokens, np.int32)
  padded[: min(len(widths), max_new_tokens)] = widths[:max_new_tokens]
  return jnp.asarray(padded)


@functools.partial(jax.jit, static_argnames=("gamma", "positions", "with_draft"))
def speculative_model_calls(
  target,
  draft,
  prompts,
  lengths,
  iterations,
  widths,
  *,
  gamma: int,
  positions: int,
  with_draft: bool,
):
  """The speculative loop's model calls, `iterations` times, and nothing else: iteration
  i's draft catch-up is widths[i] tokens wide (`catch_up_widths`: as the real loop's were;
  a feature draft's with zero features, and its target call returns features)."""
  features = uses_target_features(draft)
  if features:
    target_state, last, _ = target.init_state_with_features(prompts, lengths, positions)
  else:
    target_state, last = target.init_state(prompts, lengths, positions)
  draft_state = draft.init_state(prompts, lengths, positions)[0] if with_draft else None
  one = jnp.ones((prompts.shape[0],), jnp.int32)
  widest = gamma + 1 if features else 2

  def iteration(i, carry):
    target_state, draft_state, token = carry
    drafted = [token] * gamma
    if with_draft:
      draft_end = draft_state.end_index

      def catch_up(k: int):
        def call(state):
          extra = {}
          if features:
            extra["features"] = jnp.zeros((token.shape[0], k, draft.feature_size), jnp.float32)
          tokens = jnp.repeat(token[:, None], k, axis=1)
          logits, state = draft.extend(state, tokens, k * one, **extra)
          return logits[:, -1], state  # [batch, k, vocab] -> after the last token

        return call

      width = jnp.clip(widths[i], 1, widest)
      logits, draft_state = jax.lax.switch(
        width - 1, [catch_up(k) for k in range(1, widest + 1)], draft_state
      )
      drafted = [_argmax(logits)]
      for _ in range(gamma - 1):
        logits, draft_state = draft.extend(draft_state, drafted[-1][:, None], one)
        drafted.append(_argmax(logits[:, 0]))
      draft_state = draft.rewind(draft_state, draft_end + 1)
    target_end = target_state.end_index
    block = jnp.stack([token, *drafted], axis=1)  # [batch, gamma + 1]
    if features:
      logits, _, target_state = target.extend_with_features(target_state, block, (gamma + 1) * one)
    else:
      logits, target_state = target.extend(target_state, block, (gamma + 1) * one)
    target_state = target.rewind(target_state, target_end + 1)
    return target_state, draft_state, _argmax(logits[:, -1])

  carry = (target_state, draft_state, last)
  return jax.lax.fori_loop(0, iterations, iteration, carry)[2]


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
