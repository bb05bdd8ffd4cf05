"""The target's own responses to prompts, for distilling a draft from it (DistillSpec).

`generate_responses` decodes a batch of prompts with the library's own decoding loop
(`specsample.decoding.generate`: greedy, or sampled at a temperature), then reads the
target on each whole sequence prompt + response in one teacher-forced call of the model
contract (`init_state` + `extend_with_features`) and keeps, at every position, its top-k
log-probabilities (and its features, for a feature-level draft). Those are the draft's
soft labels (specsample.train.distill_decoder, specsample.train.distill_features).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from specsample.core.sampling import SamplingConfig
from specsample.decoding import generate
from specsample.models.decoder_only import DecoderOnly


@dataclasses.dataclass(frozen=True)
class Response:
  prompt: list[int]  # the prompt's token ids (chat template applied)
  tokens: list[int]  # the target's response, EOS included when it ended
  # The target's k likeliest tokens per position and their log-probabilities (temperature
  # 1); None when read with k = 0 (features alone).
  top_ids: np.ndarray | None  # int32[len(tokens), k]
  top_logprobs: np.ndarray | None  # float32[len(tokens), k]
  # The same at the prompt positions 0 .. len(prompt) - 2 (the target's prediction of each
  # next prompt token); None when not recorded.
  prompt_top_ids: np.ndarray | None = None  # int32[len(prompt) - 1, k]
  prompt_top_logprobs: np.ndarray | None = None  # float32[len(prompt) - 1, k]
  # The target's features (final-normed hidden states) at positions 0 .. N - 2 of the
  # sequence prompt + tokens (N tokens; position j's predicts token j + 1), for training a
  # feature-level draft (specsample.train.distill_features); None when not recorded.
  features: np.ndarray | None = None  # float16[N - 1, d_model]


def right_pad(rows: Sequence[Sequence[int]], width: int, pad_id: int) -> np.ndarray:
  """Token lists right-padded with `pad_id` to int32[len(rows), width]."""
  array = np.full((len(rows), width), pad_id, np.int32)
  for i, row in enumerate(rows):
    array[i, : len(row)] = row
  return array


@functools.partial(jax.jit, static_argnames=("k",))
def _read_sequences(model, sequences, lengths, k):
  """The target on whole sequences, teacher-forced, in one `extend` from an empty cache.

  sequences int32[b, width] (right-padded), lengths int32[b] -> (top ids int32[b, width, k],
  top log-probabilities float32[b, width, k], features float16[b, width, d_model]), where
  position j's predict token j + 1 (past a row's length - 1: padding)."""
  b, width = sequences.shape
  # A state at end index 0 (the first token is its pending one): the extend below writes
  # every token of the sequence from position 0.
  state, _ = model.init_state(sequences[:, :1], jnp.ones((b,), jnp.int32), width)
  logits, features, _ = model.extend_with_features(state, sequences, lengths)
  top_logits, top_ids = jax.lax.top_k(logits, k)  # [b, width, k]
  top_logprobs = top_logits - jax.nn.logsumexp(logits, axis=-1, keepdims=True)
  return top_ids.astype(jnp.int32), top_logprobs.astype(jnp.float32), features.astype(jnp.float16)


@jax.jit
def _read_features(model, sequences, lengths):
  """The target's features only: `_read_sequences` without the output layer, which XLA
  leaves out of the program as its logits are unused (on a CPU it is most of the cost of
  a teacher-forced call over many positions). -> features float16[b, width, d_model]."""
  b, width = sequences.shape
  state, _ = model.init_state(sequences[:, :1], jnp.ones((b,), jnp.int32), width)
  _, features, _ = model.extend_with_features(state, sequences, lengths)
  return features.astype(jnp.float16)


def read_sequences(
  target: DecoderOnly,
  sequences: Sequence[Sequence[int]],
  *,
  k: int,
  width_multiple: int = 32,
  rows: int = 8,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """`_read_sequences` on token lists, `rows` sequences per call (the logits of a call are
  [rows, width, vocab]: a bounded memory), padded to a width that is a multiple of
  `width_multiple` (few compilations). -> top ids int32[n, width, k], top log-probabilities
  float32[n, width, k], features float16[n, width, d_model]; k = 0: the features alone (the
  top ids and log-probabilities are None), without computing the logits."""
  lengths = np.array([len(s) for s in sequences], np.int32)
  width = -(-int(lengths.max()) // width_multiple) * width_multiple
  count = -(-len(sequences) // rows) * rows  # whole calls: one compiled shape
  array = right_pad(sequences, width, target.config.pad_id)
  array = np.concatenate([array, np.repeat(array[:1], count - len(sequences), axis=0)])
  lengths = np.concatenate([lengths, np.repeat(lengths[:1], count - len(sequences))])

  def read(i):
    chunk, chunk_lengths = jnp.asarray(array[i : i + rows]), jnp.asarray(lengths[i : i + rows])
    if k == 0:
      return _read_features(target, chunk, chunk_lengths)
    return _read_sequences(target, chunk, chunk_lengths, k)

  pieces = [read(i) for i in range(0, count, rows)]
  if k == 0:
    return None, None, np.concatenate([np.asarray(p) for p in pieces])[: len(sequences)]
  return tuple(
    np.concatenate([np.asarray(p[j]) for p in pieces])[: len(sequences)] for j in range(3)
  )


def rows_of(array: np.ndarray | None, row: int, start: int, end: int) -> np.ndarray | None:
  """array[row, start:end], or None where nothing was read (k = 0)."""
  return None if array is None else array[row, start:end]


def generate_responses(
  target: DecoderOnly,
  prompts: Sequence[Sequence[int]],
  *,
  max_new_tokens: int,
  temperature: float = 0.0,
  seed: int = 0,
  k: int = 8,
  width_multiple: int = 32,
  features: bool = False,
) -> list[Response]:
  """The target's responses to `prompts` (one batch): `specsample.decoding.generate` at
  `temperature` (0: greedy) with `seed`, up to `max_new_tokens` each (EOS included), then
  the target's top-k at every position of prompt + response, and with `features` its
  features there (`Response.features`); k = 0 (needs `features`): the features alone
  (top ids and log-probabilities None; no output layer computed). Prompts are
  right-padded to a multiple of `width_multiple` (few compilations)."""
  if k == 0 and not features:
    raise ValueError("k = 0 reads the features alone: it needs features=True")
  lengths = np.array([len(p) for p in prompts], np.int32)
  width = -(-int(lengths.max()) // width_multiple) * width_multiple
  output = generate(
    target, right_pad(prompts, width, target.config.pad_id), prompt_lengths=lengths,
    max_new_tokens=max_new_tokens, sampling=SamplingConfig(temperature=temperature), seed=seed,
  )  # fmt: skip
  tokens, counts = np.asarray(output.tokens), np.asarray(output.lengths)  # [b, max_new], [b]
  sequences = [list(map(int, p)) + tokens[row, : counts[row]].tolist() for row, p in
               enumerate(prompts)]  # fmt: skip
  top_ids, top_logprobs, all_features = read_sequences(
    target, sequences, k=k, width_multiple=width_multiple
  )
  responses = []
  for row, prompt in enumerate(prompts):
    start, end = len(prompt) - 1, len(sequences[row]) - 1  # positions predicting the response
    responses.append(
      Response(
        prompt=list(map(int, prompt)),
        tokens=sequences[row][start + 1 :],
        top_ids=rows_of(top_ids, row, start, end),
        top_logprobs=rows_of(top_logprobs, row, start, end),
        prompt_top_ids=rows_of(top_ids, row, 0, start),
        prompt_top_logprobs=rows_of(top_logprobs, row, 0, start),
        features=all_features[row, :end] if features else None,
      )
    )
  return responses
