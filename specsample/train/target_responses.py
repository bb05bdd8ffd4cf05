"""The target's own responses to prompts, for distilling a draft from it (DistillSpec).

`generate_responses` decodes a batch of prompts with the target (greedy or sampled) and
keeps, at every position, the target's top-k log-probabilities: at the response positions
from each decoding step, and at the prompt positions from the prefill (which computes them
anyway). Those are the draft's soft labels (specsample.train.distill_decoder).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from specsample.models.decoder_only import DecoderOnly, DecoderOnlyState
from specsample.models.decoder_only.network import empty_caches


@dataclasses.dataclass(frozen=True)
class Response:
  prompt: list[int]  # the prompt's token ids (chat template applied)
  tokens: list[int]  # the target's response, EOS included when it ended
  top_ids: np.ndarray  # int32[len(tokens), k]: the target's k likeliest tokens per position
  top_logprobs: np.ndarray  # float32[len(tokens), k]: their log-probabilities (temperature 1)
  # The same at the prompt positions 0 .. len(prompt) - 2 (the target's prediction of each
  # next prompt token, from the prefill); None when not recorded.
  prompt_top_ids: np.ndarray | None = None  # int32[len(prompt) - 1, k]
  prompt_top_logprobs: np.ndarray | None = None  # float32[len(prompt) - 1, k]
  # The target's features (final-normed hidden states) at positions 0 .. N - 2 of the
  # sequence prompt + tokens (N tokens; position j's predicts token j + 1), for training a
  # feature-level draft (specsample.train.distill_features); None when not recorded.
  features: np.ndarray | None = None  # float16[N - 1, d_model]


@functools.partial(jax.jit, static_argnames=("capacity", "k"))
def _prefill(model, prompts, lengths, capacity, k):
  """`model.init_state`'s prefill (every prompt token written, the last one pending), keeping
  the top-k log-probabilities of the next token at every prompt position [batch, width, k]
  and the features there (float16[batch, width, d_model])."""
  batch, width = prompts.shape
  caches = empty_caches(model.config, batch, width + capacity)
  state = DecoderOnlyState(caches=caches, end_index=jnp.zeros((batch,), jnp.int32))
  logits, features, state = model.extend_with_features(
    state, prompts, (lengths - 1).astype(jnp.int32)
  )
  top_logits, top_ids = jax.lax.top_k(logits, k)
  top_logprobs = top_logits - jax.nn.logsumexp(logits, axis=-1, keepdims=True)
  pending = jnp.take_along_axis(prompts, (lengths - 1)[:, None], axis=1)[:, 0]
  features = features.astype(jnp.float16)
  return state, pending.astype(jnp.int32), top_ids.astype(jnp.int32), top_logprobs, features


@functools.partial(jax.jit, static_argnames=("temperature", "k", "steps"))
def _decode_steps(model, state, pending, done, key, *, temperature, k, steps):
  """`steps` decoding steps: (state, pending, done, tokens [batch, steps], top ids and
  log-probabilities [batch, steps, k], features float16[batch, steps, d_model] of the
  pending tokens)."""
  batch = pending.shape[0]
  ones = jnp.ones((batch,), jnp.int32)
  eos = jnp.asarray(model.config.eos_ids or (-1,), jnp.int32)

  def body(carry, step_key):
    state, pending, done = carry
    logits, features, state = model.extend_with_features(state, pending[:, None], ones)
    logits = logits[:, 0]  # [batch, vocab]
    log_probs = jax.nn.log_softmax(logits)
    if temperature == 0.0:
      token = jnp.argmax(logits, axis=-1).astype(jnp.int32)
    else:
      token = jax.random.categorical(step_key, logits / temperature).astype(jnp.int32)
    top_logprobs, top_ids = jax.lax.top_k(log_probs, k)
    token = jnp.where(done, model.config.pad_id, token)
    done = done | jnp.isin(token, eos)
    outputs = (token, top_ids.astype(jnp.int32), top_logprobs, features[:, 0].astype(jnp.float16))
    return (state, token, done), outputs

  keys = jax.random.split(key, steps)
  (state, pending, done), outputs = jax.lax.scan(body, (state, pending, done), keys)
  swap = lambda x: jnp.swapaxes(x, 0, 1)  # [steps, batch, ...] -> [batch, steps, ...]
  return state, pending, done, *map(swap, outputs)


def generate_responses(
  target: DecoderOnly,
  prompts: Sequence[Sequence[int]],
  *,
  max_new_tokens: int,
  temperature: float = 0.0,
  seed: int = 0,
  k: int = 8,
  chunk: int = 16,
  width_multiple: int = 32,
  features: bool = False,
) -> list[Response]:
  """The target's responses to `prompts` (one batch), decoded `chunk` steps per call until
  every row has ended or `max_new_tokens` is reached. Prompts are right-padded to a
  multiple of `width_multiple` (few compilations); max_new_tokens is rounded up to a
  multiple of `chunk` for the cache and cut back afterwards. With `features`, each
  response keeps the target's features of its whole sequence (`Response.features`)."""
  lengths = np.array([len(p) for p in prompts], np.int32)
  width = -(-int(lengths.max()) // width_multiple) * width_multiple
  array = np.full((len(prompts), width), target.config.pad_id, np.int32)
  for i, prompt in enumerate(prompts):
    array[i, : len(prompt)] = prompt
  steps_total = -(-max_new_tokens // chunk) * chunk
  state, pending, prompt_ids, prompt_logprobs, prompt_features = _prefill(
    target, jnp.asarray(array), jnp.asarray(lengths), steps_total, k
  )
  prompt_ids, prompt_logprobs = np.asarray(prompt_ids), np.asarray(prompt_logprobs)
  prompt_features = np.asarray(prompt_features) if features else None
  done = jnp.zeros((len(prompts),), bool)
  key = jax.random.key(seed)
  pieces = []
  for number in range(steps_total // chunk):
    key, step_key = jax.random.split(key)
    state, pending, done, *outputs = _decode_steps(
      target, state, pending, done, step_key, temperature=float(temperature), k=k, steps=chunk
    )
    pieces.append(outputs)
    if bool(jnp.all(done)) or (number + 1) * chunk >= max_new_tokens:
      break
  tokens, top_ids, top_logprobs, step_features = (
    np.concatenate([np.asarray(p[i]) for p in pieces], axis=1) for i in range(4)
  )
  eos = set(target.config.eos_ids)
  responses = []
  for row, prompt in enumerate(prompts):
    count = min(max_new_tokens, tokens.shape[1])
    for position in range(count):
      if int(tokens[row, position]) in eos:
        count = position + 1
        break
    sequence_features = None
    if features:  # prompt positions 0..L-2, then the steps' L-1..L+count-2
      sequence_features = np.concatenate(
        [prompt_features[row, : len(prompt) - 1], step_features[row, :count]]
      )[: len(prompt) + count - 1]
    responses.append(
      Response(
        prompt=list(map(int, prompt)),
        tokens=tokens[row, :count].astype(int).tolist(),
        top_ids=top_ids[row, :count],
        top_logprobs=top_logprobs[row, :count].astype(np.float32),
        prompt_top_ids=prompt_ids[row, : len(prompt) - 1],
        prompt_top_logprobs=prompt_logprobs[row, : len(prompt) - 1].astype(np.float32),
        features=sequence_features,
      )
    )
  return responses
