"""Speculative sampling as one compiled `lax.while_loop` (Leviathan et al. 2023, Alg. 1).

Each iteration, for every unfinished row of the batch at once (decoding.drafters: a
drafter does steps 1, 2, 3 and 5 for its draft shape):
  1. Draft: the drafter proposes x_1..x_gamma with p_1..p_gamma (a chain; or a tree).
  2. Target: ONE call over [last, the proposal] gives q_1..q_{gamma+1}.
  3. Verify (core.verification): n accepted tokens and the next token y per row.
  4. Commit x_1..x_n, y to the output buffer; rows end at EOS or max_new_tokens.
  5. Rewind both caches to the committed prefix (only end indices move) and note what
     the draft still owes.

Between iterations the target cache holds every committed token but `last_token`; the
drafter's state says what its draft has seen. With `settings.stream`, step 4 also hands
each row's kept tokens to the host (decoding.streaming), in the same program.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from specsample.core.contract import LanguageModel
from specsample.decoding.commit import commit
from specsample.decoding.counters import LoopCounters
from specsample.decoding.drafters import make_drafter
from specsample.decoding.inputs import make_key, model_prompts
from specsample.decoding.outputs import GenerationOutput, SpeculativeTrace, raise_on_nonfinite
from specsample.decoding.settings import MAX_GAMMA, SpeculativeSettings
from specsample.decoding.streaming import OnTokens, emit, open_stream

__all__ = ["MAX_GAMMA", "SpeculativeSettings", "speculative_decode", "speculative_program"]


@struct.dataclass(kw_only=True)
class SpeculativeLoopState:
  """What every draft shape needs between iterations."""

  target_state: Any  # target cache: every committed token but last_token
  last_token: jax.Array  # int32[batch]
  drafter: Any  # the drafter's own state (its draft's cache, pending tokens, ...)
  tokens: jax.Array  # int32[batch, max_new_tokens]
  lengths: jax.Array  # int32[batch]
  done: jax.Array  # bool[batch]
  key: jax.Array
  counters: LoopCounters
  trace: SpeculativeTrace | None  # per-iteration record, when asked for


def _speculative_loop(
  target: LanguageModel,
  draft: LanguageModel,
  prompts: jax.Array,
  prompt_lengths: jax.Array,
  key: jax.Array,
  settings: SpeculativeSettings,
  stream_id: jax.Array | None = None,
) -> tuple[GenerationOutput, dict[str, jax.Array]]:
  if settings.stream and stream_id is None:
    raise ValueError("settings.stream needs a stream_id (decoding.streaming.open_stream)")
  drafter = make_drafter(draft, settings)
  batch = prompts.shape[0]
  num_new_positions = drafter.cache_positions(settings.max_new_tokens)
  target_state, last_token, drafter_state = drafter.init(
    target, prompts, prompt_lengths, num_new_positions
  )
  init = SpeculativeLoopState(
    target_state=target_state,
    last_token=last_token,
    drafter=drafter_state,
    tokens=jnp.full((batch, settings.max_new_tokens), target.pad_id, jnp.int32),
    lengths=jnp.zeros((batch,), jnp.int32),
    done=jnp.zeros((batch,), bool),
    key=key,
    counters=LoopCounters.zeros(batch, settings.gamma),
    trace=_empty_trace(batch, settings) if settings.record_trace else None,
  )

  def iteration(s: SpeculativeLoopState) -> SpeculativeLoopState:
    key, draft_key, verify_key = jax.random.split(s.key, 3)
    active = ~s.done  # [batch]

    # 1. Draft.
    proposal = drafter.propose(s.drafter, active, draft_key)
    # 2. Score [last, the proposal] with ONE target call.
    scored = drafter.score(target, s.target_state, s.last_token, proposal, active)
    # 3. Verify: n accepted draft tokens and the next token y, along a path x.  [batch] each
    verdict = drafter.verify(verify_key, proposal, scored, active)
    n, y = verdict.n, verdict.y
    bad = verdict.target_bad | verdict.draft_bad  # such rows commit nothing and stop
    # 4. Commit x_1..x_n, y.
    tokens, lengths, done = commit(
      s.tokens, s.lengths, s.done | bad, verdict.committed(), n + 1,
      eos_id=target.eos_id,
    )  # fmt: skip
    if settings.stream:  # the kept tokens: a prefix of x_1..x_n, y per row
      emit(stream_id, verdict.committed(), lengths - s.lengths)
    # 5. Rewind both caches to the committed prefix.
    target_state, drafter_state = drafter.advance(
      s.drafter, target, s.target_state, proposal, scored, verdict, active
    )
    counters = s.counters.record(
      active=active,
      n=n,
      kept=lengths - s.lengths,  # statistics count only the kept tokens
      target_bad=verdict.target_bad,
      draft_bad=verdict.draft_bad,
      num_drafted=verdict.num_drafted,
      draft_steps=proposal.steps,
      num_proposed=verdict.num_proposed,
    )
    trace = s.trace
    if trace is not None:
      i = s.counters.target_calls
      trace = trace.replace(
        drafts=trace.drafts.at[i].set(verdict.path),
        drafted=trace.drafted.at[i].set(verdict.num_drafted),
        accepted=trace.accepted.at[i].set(n),
        next_token=trace.next_token.at[i].set(y),
        active=trace.active.at[i].set(active & ~bad),
      )
    return SpeculativeLoopState(
      target_state=target_state,
      last_token=jnp.where(active, y, s.last_token),
      drafter=drafter_state,
      tokens=tokens,
      lengths=lengths,
      done=done,
      key=key,
      counters=counters,
      trace=trace,
    )

  final = jax.lax.while_loop(lambda s: ~jnp.all(s.done), iteration, init)
  output = GenerationOutput(
    tokens=final.tokens, lengths=final.lengths, stats=final.counters.stats(), trace=final.trace
  )
  flags = {"target": final.counters.target_nonfinite, "draft": final.counters.draft_nonfinite}
  return output, flags


def _empty_trace(batch: int, settings: SpeculativeSettings) -> SpeculativeTrace:
  iterations = settings.max_new_tokens  # each iteration commits >= 1 token per active row
  zeros = jnp.zeros((iterations, batch), jnp.int32)
  return SpeculativeTrace(
    drafts=jnp.zeros((iterations, batch, settings.gamma), jnp.int32),
    drafted=zeros,
    accepted=zeros,
    next_token=zeros,
    active=jnp.zeros((iterations, batch), bool),
  )


speculative_program = jax.jit(_speculative_loop, static_argnames=("settings",))
"""The compiled loop: (target, draft, prompts int32[batch, length], prompt_lengths
int32[batch], key, settings[, stream_id int32[]]) -> (GenerationOutput, nonfinite flags
{"target", "draft": bool[batch]}). One compiled program per settings and shapes;
`.lower(...)` compiles from shapes alone (scaling.abstract). With `settings.stream`, the
stream id of `decoding.streaming.open_stream` names the host sink of the call."""


def speculative_decode(
  target: LanguageModel,
  draft: LanguageModel,
  prompts,
  settings: SpeculativeSettings,
  *,
  seed: int | jax.Array = 0,
  prompt_lengths=None,
  on_tokens: OnTokens | None = None,
) -> GenerationOutput:
  """Speculative sampling with settings made once (`SpeculativeSettings`): checks the
  pair against them, prepares the prompts (as `specsample.speculative_generate` reads
  them), runs the compiled loop and raises `NonFiniteLogitsError` for rows whose logits
  went bad. `specsample.speculative_generate` is the same with keyword arguments.

  `on_tokens(row, token_ids)` is called from inside the loop with each row's newly kept
  tokens as they are accepted (it turns `settings.stream` on; decoding.streaming).
  `settings.stream` without `on_tokens` runs the streaming program and drops the tokens."""
  if not isinstance(settings, SpeculativeSettings):
    raise TypeError(f"settings must be a SpeculativeSettings, got {type(settings).__name__}")
  settings.check_pair(target, draft)
  prompts, prompt_lengths = model_prompts(target, prompts, prompt_lengths)
  key = make_key(seed)  # after every input check: a key is a first computation
  if on_tokens is None and not settings.stream:
    output, nonfinite = speculative_program(target, draft, prompts, prompt_lengths, key, settings)
  else:
    settings = dataclasses.replace(settings, stream=True)
    with open_stream(on_tokens) as stream_id:
      output, nonfinite = jax.block_until_ready(
        speculative_program(target, draft, prompts, prompt_lengths, key, settings, stream_id)
      )
  raise_on_nonfinite(nonfinite)
  return output
