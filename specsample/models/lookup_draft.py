"""`LookupThenModel`: prompt lookup where the text repeats itself, a draft model elsewhere.

At each position the n-gram lookup of `NGramDraft` runs first; where it found an earlier
occurrence of the last `trust_ngram` or more tokens, the proposal is its one-hot
continuation (copying from the prompt or the output so far: a summary quoting its text,
a rewrite, code). Where it found only a shorter one (down to the last token alone), its
continuation is proposed if the draft model is in doubt: its most likely token's
probability is below `doubt`. Everywhere else the proposal is the draft model's
distribution. Which source is used depends only on the tokens so far (and the draft
model's distribution there, itself a function of them), so the draft is one distribution
p(.|prefix) like any other: token-wise and block verification stay exact and greedy
output stays the target's. Both parts see every token (the model's cache stays complete),
so a call costs the model's forward pass plus the lookup's comparisons.

Why the doubt: a rewrite copies its source with changes, and right after a changed word
the last two tokens occur nowhere earlier while the last one does; a draft model that
has not learnt to copy is unsure there (the README's spelling-correction prompt: the
bundled feature draft alone is accepted 15% of the time). With `doubt` 0.25 the lookup's
one-token matches are used only there: on that prompt 2.74 tokens per target call
against 2.26 (gamma 3), on 24 held-out chat prompts 2.056 against 2.050 (docs/smollm2.md).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from specsample.core import contract
from specsample.core.sampling import top_probability
from specsample.models.ngram import NGramDraft, NGramState, one_hot_logits

DEFAULT_DOUBT = 0.25  # from 24 held-out chat prompts (docs/smollm2.md), not the shipped ones


@struct.dataclass
class LookupThenModelState:
  model: object  # the draft model's own state
  lookup: NGramState

  @property
  def end_index(self) -> jax.Array:  # int32[batch]: both parts are at the same position
    return self.lookup.end_index


@struct.dataclass
class LookupThenModel:
  """Draft `model` behind n-gram `lookup` (same vocabulary as the target's): the lookup's
  continuation where the last `trust_ngram` or more tokens occurred earlier, or where a
  shorter match (the lookup's `min_ngram` or more) meets the model's top probability
  below `doubt` (0: never; 1: any match of min_ngram or more)."""

  model: object
  lookup: NGramDraft
  trust_ngram: int = struct.field(pytree_node=False, default=2)
  doubt: float = struct.field(pytree_node=False, default=0.0)

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
    if not 0.0 <= self.doubt <= 1.0:
      raise ValueError(f"doubt={self.doubt} must lie in [0, 1] (a probability)")

  @classmethod
  def for_target(
    cls, model, target, *, max_ngram: int = 3, trust_ngram: int = 2,
    doubt: float = DEFAULT_DOUBT,
  ) -> LookupThenModel:  # fmt: skip
    """The lookup over n-grams of max_ngram..1 tokens (..trust_ngram with doubt 0)."""
    if not 1 <= trust_ngram <= max_ngram:
      raise ValueError(f"need 1 <= trust_ngram <= max_ngram, got {trust_ngram} and {max_ngram}")
    lookup = NGramDraft.for_target(
      target, max_ngram=max_ngram, min_ngram=1 if doubt > 0 else trust_ngram
    )
    return cls(model, lookup, trust_ngram, doubt)

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
    logits = logits.astype(jnp.float32)
    proposals, lengths, lookup_state = self.lookup.lookup(state.lookup, tokens, num_valid)
    use = self._uses_lookup(lengths, top_probability(logits))  # [batch, k]
    logits = jnp.where(use[..., None], one_hot_logits(proposals, self.vocab_size), logits)
    return logits, LookupThenModelState(model=model_state, lookup=lookup_state)

  def extend_greedy(
    self,
    state: LookupThenModelState,
    tokens: jax.Array,
    num_valid: jax.Array,
    features: jax.Array | None = None,
  ) -> tuple[contract.GreedyTokens, LookupThenModelState]:
    """`extend`'s `GreedyTokens` ([batch, k] each; `GreedyDraft`): the lookup's proposal
    (probability 1) where it is used, the model's greedy token elsewhere."""
    extra = {} if features is None else {"features": features}
    model, model_state = contract.greedy_extend(
      self.model, state.model, tokens, num_valid, **extra
    )  # [batch, k] each
    proposals, lengths, lookup_state = self.lookup.lookup(state.lookup, tokens, num_valid)
    use = self._uses_lookup(lengths, model.top_probability)  # [batch, k]
    greedy = contract.GreedyTokens(
      tokens=jnp.where(use, proposals, model.tokens),
      bad=model.bad & ~use,
      top_probability=jnp.where(use, 1.0, model.top_probability),
    )
    return greedy, LookupThenModelState(model=model_state, lookup=lookup_state)

  def _uses_lookup(self, lengths: jax.Array, model_top_probability: jax.Array) -> jax.Array:
    """Where the lookup's proposal is used: int32[batch, k] n-gram lengths (0: none) and
    the model's top probabilities float32[batch, k] -> bool[batch, k]. (With doubt 0 the
    probabilities go unread, and the compiled program does not compute them.)"""
    trusted = lengths >= self.trust_ngram
    if self.doubt <= 0.0:
      return trusted
    return trusted | ((lengths >= 1) & (model_top_probability < self.doubt))

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
