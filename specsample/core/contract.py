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

Optional abilities. Besides `LanguageModel`, a model may offer more; each ability is a
runtime-checkable Protocol below, and the loops ask `isinstance(model, Protocol)` (or the
helper next to it) instead of probing attribute names:

  Protocol           what it offers                                 helper
  PromptPadding      an id that is never inside a prompt            prompt_pad_id(model)
  TreeModel          extend_tree, keep_path (multi-draft decoding)  supports_trees(model)
  FeatureTarget      its features, for a feature-level draft        has_features(model)
  FeatureDraftModel  a draft that reads its target's features       uses_target_features(model)
  WeightTraffic      the weights one call reads (bench.roofline)    weights_per_call(model)
  GreedyDraft        greedy tokens without whole-vocabulary logits  greedy_extend(model, ...)

`isinstance` with a runtime-checkable Protocol checks that the members exist, not their
signatures; the docstrings here are the contract.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol, runtime_checkable

import jax

from specsample.core.sampling import argmax_tokens, nonfinite_logits, top_probability
from specsample.core.tree import TreeLayout


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


@runtime_checkable
class PromptPadding(Protocol):
  """A model with an id that never occurs inside a prompt (T5: 0): trailing runs of it in a
  [batch, length] prompt array are padding. Without it, array rows are read whole unless
  the caller passes prompt_lengths (see decoding.inputs.prepare_prompts)."""

  @property
  def prompt_pad_id(self) -> int | None: ...


@runtime_checkable
class TreeModel(LanguageModel, Protocol):
  """A model that scores a token tree in one call, for multi-draft (tree) decoding
  (`speculative_generate(tree=K)`): T5, DecoderOnly, MarkovLM."""

  def extend_tree(
    self, state: Any, tokens: jax.Array, layout: TreeLayout, start: int
  ) -> tuple[jax.Array, Any]:
    """Scores tokens int32[batch, k] as slots start..start+k-1 of the tree `layout`
    (core.tree.TreeLayout). Slot s is written at end_index + s, at position end_index +
    depth(s), and sees the committed prefix and the slots that are itself or its ancestors
    (slots < start were written by earlier calls on the same end index).

    Returns (logits float[batch, k, vocab], state); the end index does not move.
    """
    ...

  def keep_path(self, state: Any, slots: jax.Array, num_kept: jax.Array) -> Any:
    """Moves the entries of tree slots int32[batch, L] to end_index + 0..L-1 and advances
    the end index by num_kept int32[batch] (the accepted path becomes committed text;
    O(L) per layer)."""
    ...


@runtime_checkable
class FeatureTarget(LanguageModel, Protocol):
  """A target that gives a feature-level draft its features (DecoderOnly, MarkovLM): the
  width-d vectors its output layer reads (position j's predicts token j + 1)."""

  @property
  def feature_size(self) -> int:
    """d, the width of its features."""
    ...

  def init_state_with_features(
    self, prompts: jax.Array, prompt_lengths: jax.Array, num_new_positions: int
  ) -> tuple[Any, jax.Array, jax.Array]:
    """`init_state`, and the features of the prompt positions:
    -> (state, pending_token int32[batch], features float[batch, prompt_length, d])."""
    ...

  def extend_with_features(
    self, state: Any, tokens: jax.Array, num_valid: jax.Array
  ) -> tuple[jax.Array, jax.Array, Any]:
    """`extend`, and the features of the k positions:
    -> (logits float[batch, k, vocab], features float[batch, k, d], state)."""
    ...


@runtime_checkable
class FeatureDraftModel(LanguageModel, Protocol):
  """A feature-level draft (Li et al. 2024, "EAGLE"; models.feature_draft.FeatureDraft):
  it reads its target's features, which the speculative loop passes to it. Its
  `init_state` and `extend` take them as a keyword argument."""

  # True for a draft that reads features (a wrapper says whether what it wraps does).
  uses_target_features: bool

  @property
  def feature_size(self) -> int:
    """d: the width of the target features it reads (the target's `feature_size`)."""
    ...

  def init_state(
    self,
    prompts: jax.Array,
    prompt_lengths: jax.Array,
    num_new_positions: int,
    features: jax.Array | None = None,
  ) -> tuple[Any, jax.Array]:
    """`LanguageModel.init_state`, with features float[batch, prompt_length, d]: the
    target's prompt features as its `init_state_with_features` returns them (None:
    zeros, for timing only)."""
    ...

  def extend(
    self,
    state: Any,
    tokens: jax.Array,
    num_valid: jax.Array,
    features: jax.Array | None = None,
  ) -> tuple[jax.Array, Any]:
    """`LanguageModel.extend`, each token int32[batch, k] paired with features
    float[batch, k, d]: the target's feature of the position BEFORE it. Without features,
    k must be 1 and the token is paired with the draft's own last output (a drafting
    step). -> (logits float[batch, k, vocab], state)."""
    ...


@runtime_checkable
class WeightTraffic(Protocol):
  """A model that says which weights one `extend` call reads, once whatever its number of
  tokens (read by bench.roofline for traffic per token and rooflines)."""

  def weights_per_call(self) -> tuple[int, int] | None:
    """(count, bytes): count is multiply-adds per token row, bytes as stored. None where
    it is not known (a wrapper around a model that does not say)."""
    ...


@runtime_checkable
class GreedyDraft(Protocol):
  """A draft that gives its greedy tokens more cheaply than its logits over the whole
  vocabulary (a feature draft's reduced output vocabulary; prompt lookup in front of a
  draft): what greedy drafting needs, and nothing more."""

  def extend_greedy(
    self, state: Any, tokens: jax.Array, num_valid: jax.Array, **features: jax.Array
  ) -> tuple[GreedyTokens, Any]:
    """`extend` (features: a feature draft's keyword), giving instead of the logits
    [batch, k, vocab] what greedy drafting reads of them (`GreedyTokens`), and the state.
    Equal to what `greedy_tokens` reads of `extend`'s logits, with the same state; the
    token where the logits are unusable is unspecified (the loop reports such a
    position)."""
    ...


class GreedyTokens(NamedTuple):
  """What greedy drafting reads of a draft's logits [batch, k, vocab]."""

  tokens: jax.Array  # int32[batch, k]: the argmax, the lowest id on ties (`argmax_tokens`)
  bad: jax.Array  # bool[batch, k]: unusable logits (`nonfinite_logits`)
  top_probability: jax.Array  # float32[batch, k]: softmax at the argmax (`top_probability`)


def greedy_tokens(logits: jax.Array) -> GreedyTokens:
  """`GreedyTokens` of logits [batch, k, vocab]."""
  return GreedyTokens(argmax_tokens(logits), nonfinite_logits(logits), top_probability(logits))


@runtime_checkable
class PromptLookupFront(Protocol):
  """A draft that is prompt lookup in front of a draft model (models.lookup_draft): the
  parts, for drafters that use them apart (a dynamic tree grows from the model and adds
  the lookup's continuation as a branch of its own)."""

  model: Any  # the draft model behind the lookup
  # The n-gram lookup (init_state, rewind, and `lookup(state, tokens, num_valid)` ->
  # (proposals int32[batch, k], n-gram lengths int32[batch, k], state)).
  lookup: Any
  trust_ngram: int  # proposals found with n-grams this long or longer are used


def prompt_pad_id(model: Any) -> int | None:
  """The model's `prompt_pad_id` (`PromptPadding`), or None."""
  return model.prompt_pad_id if isinstance(model, PromptPadding) else None


def supports_trees(model: Any) -> bool:
  """Whether `model` can take part in multi-draft (tree) decoding (`TreeModel`)."""
  return isinstance(model, TreeModel)


def has_features(model: Any) -> bool:
  """Whether `model` can give a feature draft its features (`FeatureTarget`)."""
  return isinstance(model, FeatureTarget)


def uses_target_features(model: Any) -> bool:
  """Whether `model` is a feature-level draft (`FeatureDraftModel` whose
  `uses_target_features` is true): the speculative loop then passes it the target's
  features."""
  return isinstance(model, FeatureDraftModel) and bool(model.uses_target_features)


def lookup_parts(model: Any) -> tuple[Any, Any, int] | None:
  """(draft model, lookup, trust_ngram) of a draft with prompt lookup in front
  (`PromptLookupFront`), or None."""
  if isinstance(model, PromptLookupFront):
    return model.model, model.lookup, model.trust_ngram
  return None


def weights_per_call(model: Any) -> tuple[int, int] | None:
  """(count, bytes) of the weights one call of `model` reads (`WeightTraffic`), or None
  where the model does not say."""
  return model.weights_per_call() if isinstance(model, WeightTraffic) else None


def greedy_extend(
  model: Any, state: Any, tokens: jax.Array, num_valid: jax.Array, **features: jax.Array
) -> tuple[GreedyTokens, Any]:
  """`model`'s `GreedyTokens` after `extend(state, tokens, num_valid, **features)`, and
  the state: its own `extend_greedy` (`GreedyDraft`), or read off its logits. (What a
  caller leaves unused, the compiled program does not compute.)"""
  if isinstance(model, GreedyDraft):
    return model.extend_greedy(state, tokens, num_valid, **features)
  logits, state = model.extend(state, tokens, num_valid, **features)  # [batch, k, vocab]
  return greedy_tokens(logits), state
