"""The model contract: the one interface between the decoding loops and any model.

A model is ONE object that carries its parameters (it is a pytree: pass it to `jax.jit`
as an argument, its arrays are traced, its static settings are part of the program).
The decoding loops call nothing but the members below; models know nothing about
speculation.

Cache semantics. A model state holds a per-row cache and `end_index[batch]`, the number
of valid cache positions of each row. `extend` writes its k tokens at positions
`end_index .. end_index + k - 1` of each row, attends causally to everything before
them, returns the logits of all k positions, and advances each row's end index by that
row's `num_valid` (0..k). Tokens written beyond `end_index + num_valid` are stale: they
are ignored by later calls and overwritten. `rewind` only moves the end index (O(1),
never copies the cache).

The pending token. Logits at a position predict the token after it, so the decoder
always holds back the last committed token: `init_state` consumes everything but that
token and returns it. For a decoder-only model this is the last prompt token; for an
encoder-decoder model it is the decoder start token (the encoder consumes the prompt).
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import jax


@runtime_checkable
class ModelState(Protocol):
  """Whatever a model keeps between calls; the decoder reads only `end_index`."""

  end_index: jax.Array  # int32[batch]


@runtime_checkable
class LanguageModel(Protocol):
  """What `generate` and `speculative_generate` need from a model."""

  @property
  def vocab_size(self) -> int: ...

  @property
  def eos_id(self) -> int | tuple[int, ...] | None:
    """Token that ends a sequence, or a tuple of such tokens (None: sequences end only at
    max_new_tokens)."""
    ...

  @property
  def pad_id(self) -> int:
    """Token that fills output positions after a sequence ended."""
    ...

  # Optional member: `prompt_pad_id: int | None`, an id that never occurs inside a
  # prompt (T5: 0). Where a model has one, trailing runs of it in a [batch, length]
  # prompt array are padding; without it, array rows are read whole unless the caller
  # passes prompt_lengths (see decoding.inputs.prepare_prompts).
  # Optional member: `weights_per_call() -> (count, bytes)`, the weights one `extend`
  # call reads once whatever its number of tokens (count: multiply-adds per token row;
  # bytes: as stored). Read by `bench.roofline` for traffic per token and rooflines.

  def init_state(
    self, prompts: jax.Array, prompt_lengths: jax.Array, num_new_positions: int
  ) -> tuple[Any, jax.Array]:
    """Consumes the prompts and allocates room for `num_new_positions` more positions.

    Args:
      prompts: int32[batch, prompt_length], right-padded.
      prompt_lengths: int32[batch], each in 1..prompt_length.
      num_new_positions: static; how many positions `extend` may write after the state
        returned here (the decoder includes its own slack).

    Returns:
      (state, pending_token int32[batch]). Must raise ValueError at trace time (shapes
      are static) when the cache cannot hold prompt_length + num_new_positions.
    """
    ...

  def extend(self, state: Any, tokens: jax.Array, num_valid: jax.Array) -> tuple[jax.Array, Any]:
    """Appends tokens int32[batch, k] at each row's end index.

    Returns (logits float[batch, k, vocab], state); each row's end index advances by
    its num_valid (int32[batch], 0..k).
    """
    ...

  def rewind(self, state: Any, end_index: jax.Array) -> Any:
    """Sets each row's end index (int32[batch]); O(1)."""
    ...

  # Optional members, for multi-draft (tree) decoding (`speculative_generate(tree=K)`):
  #   extend_tree(state, tokens int32[batch, k], layout: core.tree.TreeLayout, start: int)
  #       -> (logits [batch, k, vocab], state): tokens are slots start..start+k-1 of the
  #       layout, written at end_index + slot, at positions end_index + depth, each seeing
  #       the committed prefix and the slots that are itself or its ancestors (slots
  #       < start were written by earlier calls on the same end index). The end index
  #       does not move.
  #   keep_path(state, slots int32[batch, L], num_kept int32[batch]) -> state: moves the
  #       entries of tree slots[b, j] to end_index + j and advances the end index by
  #       num_kept (the accepted path becomes committed text; O(L) per layer).

  # Optional members, for feature-level drafts (`uses_target_features`, e.g.
  # models.feature_draft.FeatureDraft, Li et al. 2024 "EAGLE"):
  #   on the TARGET:
  #     feature_size: int, the width d of its features (the output layer's input);
  #     init_state_with_features(prompts, prompt_lengths, num_new_positions)
  #         -> (state, pending_token, features [batch, prompt_length, d]): init_state, and
  #         the features of the prompt positions (position j's predicts token j + 1);
  #     extend_with_features(state, tokens, num_valid) -> (logits, features [batch, k, d],
  #         state): extend, and the features of the k positions.
  #   on the DRAFT: `uses_target_features = True`, `feature_size`, and
  #     init_state(prompts, prompt_lengths, num_new_positions, features=...) and
  #     extend(state, tokens, num_valid, features=...): features [batch, k, d] are the
  #     target's features of the position BEFORE each token (init_state: the target's
  #     prompt features as init_state_with_features returns them). extend without
  #     features takes one token per row and pairs it with the draft's own last output
  #     (a drafting step).


def uses_target_features(model) -> bool:
  """Whether `model` is a feature-level draft: it reads the target's features, which the
  speculative loop then passes to it (see the optional members above)."""
  return bool(getattr(model, "uses_target_features", False))


def has_features(model) -> bool:
  """Whether `model` can give a feature draft its features (the target's members above)."""
  return all(
    hasattr(model, name)
    for name in ("feature_size", "init_state_with_features", "extend_with_features")
  )
