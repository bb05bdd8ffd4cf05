"""Speculative sampling as one compiled `lax.while_loop` (Leviathan et al. 2023, Alg. 1).

Each iteration, for every unfinished row of the batch at once:
  1. Draft: gamma autoregressive draft steps give x_1..x_gamma and p_1..p_gamma.
  2. Target: ONE multi-token call over [last, x_1..x_gamma] gives q_1..q_{gamma+1}.
  3. Verify (core.verification): n accepted tokens and the next token y per row.
  4. Commit x_1..x_n, y to the output buffer; rows end at EOS or max_new_tokens.
  5. Rewind both caches to the committed prefix (only end indices move).

Invariants between iterations (per row):
  - the target cache holds every committed token but `last_token`;
  - the draft cache lags by one or two committed tokens, `draft_pending`: it never saw
    y, nor x_gamma when all gamma were accepted. Step 1 catches up on them with one
    extend whose logits at the last pending token give p_1: over 2 tokens when some row
    owes 2, over 1 token otherwise (`lax.cond`; the common case, and cheaper).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from specsample.core.contract import LanguageModel
from specsample.core.sampling import SamplingConfig, logits_to_probs, nonfinite_logits
from specsample.core.verification import (
  VERIFICATION_RULES,
  VerificationRule,
  verify,
  verify_greedy,
)
from specsample.decoding.commit import commit, draw
from specsample.decoding.inputs import (
  check_model,
  check_positive_int,
  check_sampling,
  make_key,
  prepare_prompts,
)
from specsample.decoding.outputs import (
  DecodingStats,
  GenerationOutput,
  SpeculativeTrace,
  raise_on_nonfinite,
)


@dataclasses.dataclass(frozen=True)
class SpeculativeSettings:
  """Static settings: changing any of them compiles a new program."""

  gamma: int
  max_new_tokens: int
  sampling: SamplingConfig
  rule: str | VerificationRule  # "token", "block", "greedy", or a custom rule
  record_trace: bool = False


@struct.dataclass(kw_only=True)
class SpeculativeLoopState:
  target_state: Any  # target cache: every committed token but last_token
  draft_state: Any  # draft cache: every committed token but the draft_pending ones
  last_token: jax.Array  # int32[batch]
  draft_pending: jax.Array  # int32[batch, 2]: committed tokens the draft has not seen
  draft_num_pending: jax.Array  # int32[batch]: 1 or 2
  tokens: jax.Array  # int32[batch, max_new_tokens]
  lengths: jax.Array  # int32[batch]
  done: jax.Array  # bool[batch]
  target_nonfinite: jax.Array  # bool[batch]
  draft_nonfinite: jax.Array  # bool[batch]
  key: jax.Array
  # statistics
  iterations: jax.Array  # int32[]: loop iterations = batched target calls
  row_iterations: jax.Array  # int32[batch]
  accepted: jax.Array  # int32[batch]
  rejected: jax.Array  # int32[batch]
  accepted_histogram: jax.Array  # int32[gamma + 1]
  trace: SpeculativeTrace | None  # per-iteration record, when asked for


def _draft_block(
  draft: LanguageModel,
  s: SpeculativeLoopState,
  active: jax.Array,
  key: jax.Array,
  settings: SpeculativeSettings,
) -> tuple[jax.Array, jax.Array, Any, jax.Array]:
  """Step 1: catch up on pending tokens, then draw gamma tokens from the draft.

  Returns draft tokens int32[batch, gamma], their distributions float32[batch, gamma,
  vocab], the draft state (it has seen x_1..x_{gamma-1}) and bool[batch, gamma] flags of
  unusable logits behind each p_i.
  """
  step_keys = jax.random.split(key, settings.gamma)
  one = active.astype(jnp.int32)  # [batch]: 1 for rows that advance
  catch_up = jnp.where(active, s.draft_num_pending, 0)
  first_logits, draft_state = jax.lax.cond(
    jnp.any(catch_up == 2), _catch_up_two, _catch_up_one, draft, s, catch_up
  )  # [batch, vocab]
  need_probs = settings.rule != "greedy"  # greedy verification compares tokens only
  token, probs = draw(step_keys[0], first_logits, settings.sampling, need_probs=need_probs)

  def draft_step(carry, step_key):
    draft_state, token = carry
    logits, draft_state = draft.extend(draft_state, token[:, None], one)  # [batch, 1, vocab]
    next_token, probs = draw(step_key, logits[:, 0], settings.sampling, need_probs=need_probs)
    return (draft_state, next_token), (next_token, probs, nonfinite_logits(logits[:, 0]))

  (draft_state, _), (rest_tokens, rest_probs, rest_bad) = jax.lax.scan(
    draft_step, (draft_state, token), step_keys[1:], unroll=True
  )  # rest_tokens: [gamma - 1, batch], rest_probs: [gamma - 1, batch, vocab]
  tokens = jnp.concatenate([token[:, None], rest_tokens.T], axis=1)  # [batch, gamma]
  if need_probs:  # [batch, gamma, vocab]
    probs = jnp.concatenate([probs[:, None], jnp.moveaxis(rest_probs, 0, 1)], axis=1)
  bad = jnp.concatenate([nonfinite_logits(first_logits)[:, None], rest_bad.T], axis=1)
  return tokens, probs, draft_state, bad


def _catch_up_two(draft, s: SpeculativeLoopState, catch_up: jax.Array):
  """The draft catches up on its 1 or 2 pending tokens per row in one 2-token call.

  Returns the logits after each row's last pending token [batch, vocab] and the state.
  """
  logits, draft_state = draft.extend(s.draft_state, s.draft_pending, catch_up)  # [batch, 2, vocab]
  last_pending = jnp.maximum(s.draft_num_pending - 1, 0)
  return jnp.take_along_axis(logits, last_pending[:, None, None], axis=1)[:, 0], draft_state


def _catch_up_one(draft, s: SpeculativeLoopState, catch_up: jax.Array):
  """The same when no row owes two tokens: a 1-token call, which costs less than a 2-token
  one on CPUs (a matrix-vector product, and no second position to compute)."""
  logits, draft_state = draft.extend(s.draft_state, s.draft_pending[:, :1], catch_up)
  return logits[:, 0], draft_state


def _speculative_loop(
  target: LanguageModel,
  draft: LanguageModel,
  prompts: jax.Array,
  prompt_lengths: jax.Array,
  key: jax.Array,
  settings: SpeculativeSettings,
) -> tuple[GenerationOutput, dict[str, jax.Array]]:
  gamma = settings.gamma
  batch = prompts.shape[0]
  num_new_positions = settings.max_new_tokens + gamma + 1  # room for a full block at the end
  target_state, pending = target.init_state(prompts, prompt_lengths, num_new_positions)
  draft_state, draft_pending = draft.init_state(prompts, prompt_lengths, num_new_positions)
  zeros = jnp.zeros((batch,), jnp.int32)
  init = SpeculativeLoopState(
    target_state=target_state,
    draft_state=draft_state,
    last_token=pending,
    draft_pending=jnp.stack([draft_pending, jnp.full_like(draft_pending, target.pad_id)], 1),
    draft_num_pending=jnp.ones((batch,), jnp.int32),
    tokens=jnp.full((batch, settings.max_new_tokens), target.pad_id, jnp.int32),
    lengths=zeros,
    done=jnp.zeros((batch,), bool),
    target_nonfinite=jnp.zeros((batch,), bool),
    draft_nonfinite=jnp.zeros((batch,), bool),
    key=key,
    iterations=jnp.zeros((), jnp.int32),
    row_iterations=zeros,
    accepted=zeros,
    rejected=zeros,
    accepted_histogram=jnp.zeros((gamma + 1,), jnp.int32),
    trace=_empty_trace(batch, settings) if settings.record_trace else None,
  )

  def iteration(s: SpeculativeLoopState) -> SpeculativeLoopState:
    key, draft_key, verify_key = jax.random.split(s.key, 3)
    active = ~s.done  # [batch]
    target_end = s.target_state.end_index  # [batch]
    draft_end = s.draft_state.end_index  # [batch]

    # 1. Draft gamma tokens.  x: [batch, gamma], p: [batch, gamma, vocab]
    x, p, draft_state, draft_bad = _draft_block(draft, s, active, draft_key, settings)

    # 2. Score [last, x_1..x_gamma] with ONE target call.  q: [batch, gamma + 1, vocab]
    target_tokens = jnp.concatenate([s.last_token[:, None], x], axis=1)
    num_scored = jnp.where(active, gamma + 1, 0)
    target_logits, target_state = target.extend(s.target_state, target_tokens, num_scored)

    # 3. Verify: n accepted draft tokens and the next token y.  [batch] each
    if settings.rule == "greedy":
      n, y = verify_greedy(x, target_logits)  # argmax of the logits: no softmax needed
    else:
      q = logits_to_probs(target_logits, settings.sampling)
      n, y = verify(settings.rule, verify_key, x, p, q)
    # Rows whose verdict used NaN/inf logits (q_1..q_{n+1}, p_1..p_{n+1}) are stopped
    # and reported; later positions were never looked at.
    offsets = jnp.arange(gamma + 1, dtype=jnp.int32)[None, :]  # [1, gamma + 1]
    used = (offsets <= n[:, None]) & active[:, None]  # [batch, gamma + 1]
    target_bad = jnp.any(nonfinite_logits(target_logits) & used, axis=1)
    draft_bad = jnp.any(draft_bad & used[:, :gamma], axis=1)

    # 4. Commit x_1..x_n, y (rows with bad logits commit nothing and stop).
    x_then_y = jnp.where(offsets == n[:, None], y[:, None], jnp.pad(x, ((0, 0), (0, 1))))
    stopped = s.done | target_bad | draft_bad
    tokens, lengths, done = commit(
      s.tokens, s.lengths, stopped, x_then_y, n + 1, eos_id=target.eos_id
    )

    # 5. Rewind. The target keeps last, x_1..x_n (y is pending); the draft saw
    #    x_1..x_{gamma-1}, so it keeps x_1..x_min(n, gamma-1) and owes y (and x_gamma).
    all_accepted = n == gamma
    target_state = target.rewind(target_state, jnp.where(active, target_end + n + 1, target_end))
    draft_kept = draft_end + s.draft_num_pending + jnp.minimum(n, gamma - 1)
    draft_state = draft.rewind(draft_state, jnp.where(active, draft_kept, draft_end))
    pending_if_all = jnp.stack([x[:, -1], y], axis=1)
    pending_if_not = jnp.stack([y, jnp.full_like(y, target.pad_id)], axis=1)
    new_pending = jnp.where(all_accepted[:, None], pending_if_all, pending_if_not)

    counted = active & ~(target_bad | draft_bad)  # [batch]: row-iterations in the statistics
    trace = s.trace
    if trace is not None:
      i = s.iterations
      trace = trace.replace(
        drafts=trace.drafts.at[i].set(x),
        accepted=trace.accepted.at[i].set(n),
        next_token=trace.next_token.at[i].set(y),
        active=trace.active.at[i].set(counted),
      )
    return s.replace(
      trace=trace,
      target_state=target_state,
      draft_state=draft_state,
      last_token=jnp.where(active, y, s.last_token),
      draft_pending=jnp.where(active[:, None], new_pending, s.draft_pending),
      draft_num_pending=jnp.where(active, jnp.where(all_accepted, 2, 1), s.draft_num_pending),
      tokens=tokens,
      lengths=lengths,
      done=done,
      target_nonfinite=s.target_nonfinite | target_bad,
      draft_nonfinite=s.draft_nonfinite | draft_bad,
      key=key,
      iterations=s.iterations + 1,
      row_iterations=s.row_iterations + counted,
      accepted=s.accepted + jnp.where(counted, n, 0),
      rejected=s.rejected + (counted & ~all_accepted),
      accepted_histogram=s.accepted_histogram
      + jnp.sum(jax.nn.one_hot(n, gamma + 1, dtype=jnp.int32) * counted[:, None], axis=0),
    )

  final = jax.lax.while_loop(lambda s: ~jnp.all(s.done), iteration, init)
  stats = DecodingStats(
    target_calls=final.iterations,
    draft_calls=final.iterations * gamma,
    iterations=final.row_iterations,
    drafted=final.row_iterations * gamma,
    accepted=final.accepted,
    rejected=final.rejected,
    accepted_histogram=final.accepted_histogram,
  )
  output = GenerationOutput(
    tokens=final.tokens, lengths=final.lengths, stats=stats, trace=final.trace
  )
  return output, {"target": final.target_nonfinite, "draft": final.draft_nonfinite}


def _empty_trace(batch: int, settings: SpeculativeSettings) -> SpeculativeTrace:
  iterations = settings.max_new_tokens  # each iteration commits >= 1 token per active row
  zeros = jnp.zeros((iterations, batch), jnp.int32)
  return SpeculativeTrace(
    drafts=jnp.zeros((iterations, batch, settings.gamma), jnp.int32),
    accepted=zeros,
    next_token=zeros,
    active=jnp.zeros((iterations, batch), bool),
  )


_speculative_compiled = jax.jit(_speculative_loop, static_argnames=("settings",))


def speculative_generate(
  target: LanguageModel,
  draft: LanguageModel,
  prompts,
  *,
  gamma: int | str = 4,
  max_new_tokens: int,
  sampling: SamplingConfig | None = None,
  verification: str | VerificationRule = "token",
  seed: int | jax.Array = 0,
  prompt_lengths=None,
  trace: bool = False,
) -> GenerationOutput:
  """Speculative sampling: the output is distributed exactly as `generate(target, ...)`.

  Args:
    target: the model whose distribution the output follows (model contract).
    draft: the cheaper model that proposes tokens; same vocabulary as the target.
    prompts: int[batch, prompt_length] (with optional `prompt_lengths`), or a list of
      token lists of any lengths.
    gamma: draft tokens proposed per iteration (static), or "auto": measure alpha, c and
      r on these prompts and take the gamma the speedup model prefers (see
      `decoding.tuning.tune_gamma`; it costs a probe run and a few compilations each
      call, so tune once and pass the number when decoding many batches). The gamma
      used is `output.stats.gamma`.
    max_new_tokens: tokens to generate per row at most (rows also end at the target's EOS).
    sampling: temperature / top-k / top-p, applied identically to draft and target.
      Temperature 0 decodes greedily and then equals greedy `generate` token for token.
    verification: "token" (Leviathan et al. Alg. 1) or "block" (Sun et al. 2024); with
      temperature 0 both reduce to "greedy", which may also be named directly. A
      callable `(key, draft_tokens, draft_probs, target_probs) -> Verdict` plugs in a
      rule of your own (it is static: pass the same function object to reuse the
      compiled program); check its exactness with `MarkovLM.exact_distribution`.
    seed: int or jax PRNG key. The same seed gives the same output.
    trace: also record every iteration's draft tokens, accepted count and next token
      (`output.trace`, for the acceptance-trace picture); a separate compiled program.

  Returns:
    GenerationOutput: tokens int32[batch, max_new_tokens] (pad after each row's end),
    lengths int32[batch], DecodingStats (alpha, tokens_per_target_call, histogram, ...),
    and the SpeculativeTrace when asked for.
  """
  check_model("target", target)
  check_model("draft", draft)
  if draft.vocab_size != target.vocab_size:
    raise ValueError(
      f"draft and target must share a vocabulary: draft vocab_size={draft.vocab_size}, "
      f"target vocab_size={target.vocab_size}"
    )
  sampling = check_sampling(sampling)
  if isinstance(gamma, str):
    if gamma != "auto":
      raise ValueError(f'gamma must be a positive int or "auto", got {gamma!r}')
    from specsample.decoding.tuning import tune_gamma

    gamma = tune_gamma(
      target,
      draft,
      prompts,
      sampling=sampling,
      verification=verification,
      prompt_lengths=prompt_lengths,
      seed=seed,
    ).gamma
  gamma = check_positive_int("gamma", gamma)
  if not callable(verification) and verification not in VERIFICATION_RULES:
    raise ValueError(
      f"unknown verification {verification!r}; expected one of {VERIFICATION_RULES} "
      "or a callable rule"
    )
  if verification == "greedy" and not sampling.is_greedy:
    raise ValueError(
      "verification='greedy' is only exact at temperature 0; use 'token' or 'block' "
      f"for temperature {sampling.temperature}"
    )
  settings = SpeculativeSettings(
    gamma=gamma,
    max_new_tokens=check_positive_int("max_new_tokens", max_new_tokens),
    sampling=sampling,
    rule="greedy" if sampling.is_greedy and not callable(verification) else verification,
    record_trace=bool(trace),
  )
  prompts, prompt_lengths = prepare_prompts(
    prompts, prompt_lengths, vocab_size=target.vocab_size, pad_id=target.pad_id
  )
  key = make_key(seed)  # after every input check: a key is a first computation
  output, nonfinite = _speculative_compiled(target, draft, prompts, prompt_lengths, key, settings)
  raise_on_nonfinite(nonfinite)
  return output
