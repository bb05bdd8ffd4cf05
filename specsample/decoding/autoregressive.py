"""Plain autoregressive decoding: the baseline, as one compiled `lax.while_loop`.

With streaming on, each step hands its kept token per row to the host (decoding.streaming).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from specsample.core.contract import LanguageModel
from specsample.core.sampling import SamplingConfig, nonfinite_logits
from specsample.decoding.commit import commit, draw
from specsample.decoding.inputs import (
  check_model,
  check_positive_int,
  check_sampling,
  make_key,
  model_prompts,
)
from specsample.decoding.outputs import DecodingStats, GenerationOutput, raise_on_nonfinite
from specsample.decoding.streaming import OnTokens, emit, open_stream


@dataclasses.dataclass(frozen=True)
class AutoregressiveSettings:
  """Static settings: changing any of them compiles a new program."""

  max_new_tokens: int
  sampling: SamplingConfig
  stream: bool = False  # each step calls the host with its kept tokens (decoding.streaming)


@struct.dataclass(kw_only=True)
class AutoregressiveLoopState:
  model_state: Any  # the model's cache; holds everything before `last_token`
  last_token: jax.Array  # int32[batch]: committed, not yet fed to the model
  tokens: jax.Array  # int32[batch, max_new_tokens]
  lengths: jax.Array  # int32[batch]
  done: jax.Array  # bool[batch]
  nonfinite: jax.Array  # bool[batch]: the model's logits went bad in this row
  target_calls: jax.Array  # int32[]: batched forward passes so far
  iterations: jax.Array  # int32[batch]: forward passes each row took part in
  key: jax.Array


def _generate_loop(
  model: LanguageModel,
  prompts: jax.Array,
  prompt_lengths: jax.Array,
  key: jax.Array,
  settings: AutoregressiveSettings,
  stream_id: jax.Array | None = None,
) -> tuple[GenerationOutput, jax.Array]:
  batch = prompts.shape[0]
  model_state, pending = model.init_state(prompts, prompt_lengths, settings.max_new_tokens)
  init = AutoregressiveLoopState(
    model_state=model_state,
    last_token=pending,
    tokens=jnp.full((batch, settings.max_new_tokens), model.pad_id, jnp.int32),
    lengths=jnp.zeros((batch,), jnp.int32),
    done=jnp.zeros((batch,), bool),
    nonfinite=jnp.zeros((batch,), bool),
    target_calls=jnp.zeros((), jnp.int32),
    iterations=jnp.zeros((batch,), jnp.int32),
    key=key,
  )

  def step(s: AutoregressiveLoopState) -> AutoregressiveLoopState:
    key, sample_key = jax.random.split(s.key)
    active = ~s.done  # [batch]
    num_valid = active.astype(jnp.int32)
    logits, model_state = model.extend(s.model_state, s.last_token[:, None], num_valid)
    nonfinite = s.nonfinite | (nonfinite_logits(logits[:, 0]) & active)  # logits: [batch, 1, vocab]
    token, _ = draw(sample_key, logits[:, 0], settings.sampling, need_probs=False)  # [batch]
    tokens, lengths, done = commit(
      s.tokens, s.lengths, s.done | nonfinite, token[:, None], num_valid, eos_id=model.eos_id
    )
    if settings.stream:  # [batch, 1] and the count kept per row (0 or 1)
      emit(stream_id, token[:, None], lengths - s.lengths)
    return s.replace(
      model_state=model_state,
      last_token=jnp.where(active, token, s.last_token),
      tokens=tokens,
      lengths=lengths,
      done=done,
      nonfinite=nonfinite,
      target_calls=s.target_calls + 1,
      iterations=s.iterations + num_valid,
      key=key,
    )

  final = jax.lax.while_loop(lambda s: ~jnp.all(s.done), step, init)
  zeros = jnp.zeros((batch,), jnp.int32)
  stats = DecodingStats(
    target_calls=final.target_calls,
    draft_calls=jnp.zeros((), jnp.int32),
    iterations=final.iterations,
    drafted=zeros,
    accepted=zeros,
    rejected=zeros,
  )
  output = GenerationOutput(tokens=final.tokens, lengths=final.lengths, stats=stats)
  return output, final.nonfinite


# Plain decoding's compiled program, cached per shapes and settings
# (`programs.clear_compiled_programs` drops it).
generate_program = jax.jit(_generate_loop, static_argnames=("settings",))


def generate(
  model: LanguageModel,
  prompts,
  *,
  max_new_tokens: int,
  sampling: SamplingConfig | None = None,
  seed: int | jax.Array = 0,
  prompt_lengths=None,
  on_tokens: OnTokens | None = None,
) -> GenerationOutput:
  """Autoregressive decoding of `model`: one forward pass per generated token.

  Args:
    model: any object implementing the model contract (it carries its parameters).
    prompts: int[batch, prompt_length] (with optional `prompt_lengths`), or a list of
      token lists of any lengths (right-padded here).
    max_new_tokens: tokens to generate per row at most (rows also end at EOS).
    sampling: temperature / top-k / top-p; default temperature 1. Temperature 0 = greedy.
    seed: int or jax PRNG key. The same seed gives the same output.
    on_tokens: `on_tokens(row, token_ids)`, called from inside the loop with each row's
      newly kept token as it is generated (decoding.streaming); a separate compiled
      program, whose tokens equal those of the one without.

  Returns:
    GenerationOutput with tokens int32[batch, max_new_tokens] (pad after each row's end),
    lengths int32[batch] and DecodingStats.
  """
  check_model("target", model)
  settings = AutoregressiveSettings(
    max_new_tokens=check_positive_int("max_new_tokens", max_new_tokens),
    sampling=check_sampling(sampling),
    stream=on_tokens is not None,
  )
  prompts, prompt_lengths = model_prompts(model, prompts, prompt_lengths)
  key = make_key(seed)  # after every input check: a key is a first computation
  if settings.stream:
    with open_stream(on_tokens) as stream_id:
      output, nonfinite = jax.block_until_ready(
        generate_program(model, prompts, prompt_lengths, key, settings, stream_id)
      )
  else:
    output, nonfinite = generate_program(model, prompts, prompt_lengths, key, settings)
  raise_on_nonfinite({"model": nonfinite})
  return output
