"""`LookupThenModel`: prompt lookup where the text repeats itself, a draft model elsewhere.

At each position the n-gram lookup of `NGramDraft` runs first; where it found an earlier
occurrence of the last `trust_ngram` or more tokens, the proposal is its one-hot
continuation (copying from the prompt or the output so far: a summary quoting its text,
a rewrite, code), and everywhere else it is the draft model's distribution. Which source
is used depends only on the tokens so far, so the draft is one distribution p(.|prefix)
like any other: token-wise and block verification stay exact and greedy output stays
the target's. Both parts see every token (the model's cache stays complete), so a call
costs the model's forward pass plus the lookup's comparisons.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from specsample.core import contract
from specsample.models.ngram import NGramDraft, NGramState, one_hot_logits


@struct.dataclass
class LookupThenModelState:
  model: object  # the draft model's own state
  lookup: NGramState

  @property
  def end_index(self) -> jax.Array:  # int32[batch]: both parts are at the same position
    return self.lookup.end_index


@struct.dataclass
class LookupThenModel:
  """Draft `model` behind n-gram `lookup` (same vocabulary as the target's)."""

  model: object
  lookup: NGramDraft
  trust_ngram: int = struct.field(pytree_node=False, default=2)

  def __post_init__(self):
    if self.model.vocab_size != self.lookup.vocab_size:
      raise ValueError(
        f"the draft model has {self.model.vocab_size} tokens and the lookup "
        f"{self.lookup.vocab_size}: they must share the target's vocabulary"
      )
    if not self.lookup.min_ngram <= self.trust_ngram <= self.lookup.max_ngram:
      raise ValueError(
        f"trust_ngram={self.trust_ngram} must lie in the lookup's n-gram sizes "
        f"{self.lookup.min_ngram}..{self.lookup.max_ngram}"
      )

  @classmethod
  def for_target(
    cls, model, target, *, max_ngram: int = 3, trust_ngram: int = 2
  ) -> LookupThenModel:
    if not 1 <= trust_ngram <= max_ngram:
      raise ValueError(f"need 1 <= trust_ngram <= max_ngram, got {trust_ngram} and {max_ngram}")
    lookup = NGramDraft.for_target(target, max_ngram=max_ngram, min_ngram=trust_ngram)
    return cls(model, lookup, trust_ngram)

  @property
  def vocab_size(self) -> int:
    return self.model.vocab_size

  @property
  def uses_target_features(self) -> bool:
    """A feature draft behind the lookup reads the target's features (passed through)."""
    return contract.uses_target_features(self.model)

  @property
  def feature_size(self) -> int:
    return self.model.feature_size

  @property
  def eos_id(self):
    return self.model.eos_id

  @property
  def pad_id(self) -> int:
    return self.model.pad_id

  def init_state(
    self,
    prompts: jax.Array,
    prompt_lengths: jax.Array,
    num_new_positions: int,
    features: jax.Array | None = None,
  ) -> tuple[LookupThenModelState, jax.Array]:
    """features: the target's, for a feature draft (passed to it)."""
    extra = {} if features is None else {"features": features}
    model_state, pending = self.model.init_state(
      prompts, prompt_lengths, num_new_positions, **extra
    )
    lookup_state, _ = self.lookup.init_state(prompts, prompt_lengths, num_new_positions)
    return LookupThenModelState(model=model_state, lookup=lookup_state), pending

  def extend(
    self,
    state: LookupThenModelState,
    tokens: jax.Array,
    num_valid: jax.Array,
    features: jax.Array | None = None,
  ) -> tuple[jax.Array, LookupThenModelState]:
    """tokens int32[batch, k] -> logits float32[batch, k, vocab] and the new state
    (features: the target's, for a feature draft)."""
    extra = {} if features is None else {"features": features}
    logits, model_state = self.model.extend(state.model, tokens, num_valid, **extra)
    proposals, lengths, lookup_state = self.lookup.lookup(state.lookup, tokens, num_valid)
    one_hot = one_hot_logits(proposals, self.vocab_size)  # [batch, k, vocab]
    trusted = (lengths >= self.trust_ngram)[..., None]  # [batch, k, 1]
    logits = jnp.where(trusted, one_hot, logits.astype(jnp.float32))
    return logits, LookupThenModelState(model=model_state, lookup=lookup_state)

  def extend_greedy(
    self,
    state: LookupThenModelState,
    tokens: jax.Array,
    num_valid: jax.Array,
    features: jax.Array | None = None,
  ) -> tuple[tuple[jax.Array, jax.Array], LookupThenModelState]:
    """`extend`'s argmax tokens and unusable flags ([batch, k] each; `GreedyDraft`): the
    lookup's proposal where trusted, the model's greedy token elsewhere."""
    extra = {} if features is None else {"features": features}
    (best, bad), model_state = contract.greedy_extend(
      self.model, state.model, tokens, num_valid, **extra
    )  # [batch, k] each
    proposals, lengths, lookup_state = self.lookup.lookup(state.lookup, tokens, num_valid)
    trusted = lengths >= self.trust_ngram  # [batch, k]
    best = jnp.where(trusted, proposals, best)
    return (best, bad & ~trusted), LookupThenModelState(model=model_state, lookup=lookup_state)

  def weights_per_call(self) -> tuple[int, int] | None:
    """The model's (the lookup reads no weights; the model runs on every call); None when
    the model does not say."""
    return contract.weights_per_call(self.model)

  def rewind(self, state: LookupThenModelState, end_index: jax.Array) -> LookupThenModelState:
    """Moves both parts by the same number of positions (the model may count its positions
    from elsewhere, as a T5 decoder does)."""
    shift = end_index.astype(jnp.int32) - state.lookup.end_index  # [batch]
    return LookupThenModelState(
      model=self.model.rewind(state.model, state.model.end_index + shift),
      lookup=self.lookup.rewind(state.lookup, end_index),
    )
