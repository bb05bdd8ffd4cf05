"""`MarkovLM`: a Markov-chain language model behind the model contract.

Its next-token logits are a lookup in a table indexed by the previous `order` tokens
(order 1: a `[vocab, vocab]` bigram table, row = previous token). It keeps a real, if
trivial, cache: the tokens fed so far, written at each row's own end index and read
back to form the context, so a decoder that rewinds or catches up wrongly gets wrong
logits. Its exact sequence distribution is computable (`exact_distribution`), which is
what lets tests prove that speculative sampling is lossless.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from specsample.core.sampling import SamplingConfig, logits_to_probs
from specsample.core.tree import TreeLayout
from specsample.models.ngram import NGramState

# Context positions before the start of a sequence read as this token (order >= 2).
_BEFORE_START_TOKEN = 0


# MarkovLM's cache: the tokens fed so far and each row's end index, prompt lookup's history.
MarkovState = NGramState


@struct.dataclass
class MarkovLM:
  """Markov LM of order `logits_table.ndim - 1`.

  Attributes:
    logits_table: float[vocab, ..., vocab]; entry [t_{-order}, ..., t_{-1}] holds the
      logits of the next token.
    eos_id: token that ends a sequence, or None.
    pad_id: token that fills outputs after EOS.
    max_length: cache capacity (prompt + generated positions) a state may have.
  """

  logits_table: jax.Array
  eos_id: int | None = struct.field(pytree_node=False, default=None)
  pad_id: int = struct.field(pytree_node=False, default=0)
  max_length: int = struct.field(pytree_node=False, default=512)

  def __post_init__(self):
    shape = getattr(self.logits_table, "shape", None)
    if shape is None:  # a placeholder leaf inside a JAX tree transformation
      return
    if len(shape) < 2 or len(set(shape)) != 1:
      raise ValueError(f"logits_table must be [vocab] * (order + 1), got shape {shape}")
    for name, token in (("eos_id", self.eos_id), ("pad_id", self.pad_id)):
      if token is not None and not 0 <= token < shape[-1]:
        raise ValueError(f"{name}={token} is outside the vocabulary of size {shape[-1]}")

  @classmethod
  def random(
    cls,
    seed: int,
    vocab_size: int,
    *,
    order: int = 1,
    scale: float = 2.0,
    eos_id: int | None = None,
    max_length: int = 512,
  ) -> MarkovLM:
    """A model with i.i.d. normal logits of standard deviation `scale`."""
    shape = (vocab_size,) * (order + 1)
    table = scale * jax.random.normal(jax.random.key(seed), shape, jnp.float32)
    return cls(table, eos_id=eos_id, max_length=max_length)

  @property
  def vocab_size(self) -> int:
    return self.logits_table.shape[-1]

  @property
  def order(self) -> int:
    return self.logits_table.ndim - 1

  # ----- the model contract ------------------------------------------------------------

  def init_state(
    self, prompts: jax.Array, prompt_lengths: jax.Array, num_new_positions: int
  ) -> tuple[MarkovState, jax.Array]:
    batch, prompt_length = prompts.shape
    capacity = prompt_length + num_new_positions
    if capacity > self.max_length:
      raise ValueError(
        f"MarkovLM cache too small: prompts of length {prompt_length} plus "
        f"{num_new_positions} positions for generation need {capacity} positions, "
        f"but max_length is {self.max_length}"
      )
    return MarkovState.of_prompts(prompts, prompt_lengths, num_new_positions)

  def extend(
    self, state: MarkovState, tokens: jax.Array, num_valid: jax.Array
  ) -> tuple[jax.Array, MarkovState]:
    batch, k = tokens.shape
    positions = state.end_index[:, None] + jnp.arange(k, dtype=jnp.int32)  # [batch, k]
    rows = jnp.arange(batch)[:, None]  # [batch, 1]
    cache = state.tokens.at[rows, positions].set(tokens.astype(jnp.int32), mode="drop")
    context = []  # order x [batch, k]: t_{-order} .. t_{-1} of each position, from the cache
    for back in range(self.order - 1, -1, -1):
      source = positions - back
      read = jnp.take_along_axis(cache, jnp.maximum(source, 0), axis=1)
      context.append(jnp.where(source >= 0, read, _BEFORE_START_TOKEN))
    logits = self.logits_table[tuple(context)]  # [batch, k, vocab]
    end_index = state.end_index + num_valid.astype(jnp.int32)
    return logits, MarkovState(tokens=cache, end_index=end_index)

  def rewind(self, state: MarkovState, end_index: jax.Array) -> MarkovState:
    return state.replace(end_index=end_index.astype(jnp.int32))

  # ----- features, for feature drafts: position j's feature is one_hot(token j) -----------

  @property
  def feature_size(self) -> int:
    return self.vocab_size

  def init_state_with_features(
    self, prompts: jax.Array, prompt_lengths: jax.Array, num_new_positions: int
  ) -> tuple[MarkovState, jax.Array, jax.Array]:
    state, pending = self.init_state(prompts, prompt_lengths, num_new_positions)
    return state, pending, jax.nn.one_hot(prompts, self.vocab_size)

  def extend_with_features(
    self, state: MarkovState, tokens: jax.Array, num_valid: jax.Array
  ) -> tuple[jax.Array, jax.Array, MarkovState]:
    logits, state = self.extend(state, tokens, num_valid)
    return logits, jax.nn.one_hot(tokens, self.vocab_size), state

  def extend_tree(
    self, state: MarkovState, tokens: jax.Array, layout: TreeLayout, start: int
  ) -> tuple[jax.Array, MarkovState]:
    """Tree slots start..start+k-1 (written at end_index + slot); each position's context
    is read along its own ancestors, then the committed prefix. The end index stays."""
    batch, k = tokens.shape
    rows = jnp.arange(batch)[:, None]
    written = state.end_index[:, None] + start + jnp.arange(k, dtype=jnp.int32)
    cache = state.tokens.at[rows, written].set(tokens.astype(jnp.int32), mode="drop")
    context = []
    slots = start + jnp.arange(k, dtype=jnp.int32)
    for back in range(self.order - 1, -1, -1):  # cache index end + (slot, or -m in the prefix)
      if isinstance(layout, TreeLayout):  # one static layout for every row
        offsets = jnp.asarray([layout.back(start + i, back) for i in range(k)], jnp.int32)[None]
      else:  # each row's own (core.dynamic_tree.RowTrees)
        offsets = layout.back(jnp.broadcast_to(slots, (batch, k)), back)  # [batch, k]
      source = state.end_index[:, None] + offsets  # [batch, k]
      read = jnp.take_along_axis(cache, jnp.maximum(source, 0), axis=1)
      context.append(jnp.where(source >= 0, read, _BEFORE_START_TOKEN))
    return self.logits_table[tuple(context)], state.replace(tokens=cache)

  def keep_path(self, state: MarkovState, slots: jax.Array, num_kept: jax.Array) -> MarkovState:
    """Moves tree slots int32[batch, L] to end_index + 0..L-1; commits num_kept of them."""
    batch, length = slots.shape
    rows = jnp.arange(batch)[:, None]
    kept = jnp.take_along_axis(state.tokens, state.end_index[:, None] + slots, axis=1)
    target = state.end_index[:, None] + jnp.arange(length, dtype=jnp.int32)
    tokens = state.tokens.at[rows, target].set(kept, mode="drop")
    return MarkovState(tokens=tokens, end_index=state.end_index + num_kept.astype(jnp.int32))

  # ----- exact distributions, for tests and analysis -------------------------------------

  def next_token_probs(self, sampling: SamplingConfig) -> np.ndarray:
    """The processed next-token distribution of every context.  -> float64[vocab]*(order+1)."""
    return np.asarray(logits_to_probs(self.logits_table, sampling), dtype=np.float64)

  def exact_distribution(
    self, prompt: Sequence[int], max_new_tokens: int, sampling: SamplingConfig
  ) -> dict[tuple[int, ...], float]:
    """Probability of every output the decoder can return for one prompt.

    Outputs are tuples of `max_new_tokens` tokens, padded with `pad_id` after EOS,
    exactly as `generate` returns them. Entries with probability 0 are omitted.
    """
    if not prompt:
      raise ValueError("prompt must hold at least one token")
    probs = self.next_token_probs(sampling)
    vocab, order = self.vocab_size, self.order
    start = [_BEFORE_START_TOKEN] * order + [int(t) for t in prompt]
    # Breadth-first over outputs: (tokens so far, probability, ended).
    frontier = [((), 1.0, False)]
    for _ in range(max_new_tokens):
      grown = []
      for output, prob, ended in frontier:
        if ended:
          grown.append((output + (self.pad_id,), prob, True))
          continue
        context = (start + list(output))[-order:]
        for token, p in zip(range(vocab), probs[tuple(context)], strict=True):
          if p > 0:
            grown.append((output + (token,), prob * p, token == self.eos_id))
      frontier = grown
    distribution: dict[tuple[int, ...], float] = {}
    for output, prob, _ in frontier:
      distribution[output] = distribution.get(output, 0.0) + prob
    return distribution

  def acceptance_probabilities(self, draft: MarkovLM, sampling: SamplingConfig) -> np.ndarray:
    """sum_x min(p, q) for every context.  -> float64[vocab]*order (needs the same order)."""
    if draft.logits_table.shape != self.logits_table.shape:
      raise ValueError("acceptance_probabilities needs a draft of the same vocabulary and order")
    return np.minimum(draft.next_token_probs(sampling), self.next_token_probs(sampling)).sum(-1)


@struct.dataclass
class MarkovFeatureState:
  tokens: jax.Array  # int32[batch, capacity]: every token fed so far, per row
  previous: jax.Array  # int32[batch, capacity]: the previous token its feature named
  end_index: jax.Array  # int32[batch]
  last_feature: jax.Array  # float32[batch, vocab]: the output at end_index - 1


@struct.dataclass
class MarkovFeatureDraft:
  """A feature draft for a second-order `MarkovLM` target. At position j it reads the
  previous token from the feature paired with token j (one_hot(token j - 1); zeros, token
  0, before the start, as MarkovLM reads it), writes both to its cache at the row's end
  index, and predicts feature j as one_hot(token j). Its cache is consistent when every
  entry's previous token is the entry before it, from position 1 up to j; then it looks up
  its [vocab, vocab, vocab] table at (token j - 1, token j), otherwise at a wrong context.
  So with the target's table it proposes exactly the target's distribution (alpha 1) if,
  and only if, the decoder pairs every token with the right feature AND keeps the draft's
  cache in step with the committed text (no stale or skipped entries)."""

  logits_table: jax.Array  # float[vocab, vocab, vocab]
  eos_id: int | None = struct.field(pytree_node=False, default=None)
  pad_id: int = struct.field(pytree_node=False, default=0)

  uses_target_features = True

  @property
  def vocab_size(self) -> int:
    return self.logits_table.shape[-1]

  @property
  def feature_size(self) -> int:
    return self.vocab_size

  def init_state(self, prompts, prompt_lengths, num_new_positions, features=None):
    batch, length = prompts.shape
    tokens = jnp.zeros((batch, length + num_new_positions), jnp.int32)
    before = jnp.pad(prompts, ((0, 0), (1, 0)))[:, :-1]  # token 0 before the start
    pending = jnp.take_along_axis(prompts, (prompt_lengths - 1)[:, None], axis=1)[:, 0]
    state = MarkovFeatureState(
      tokens=tokens.at[:, :length].set(prompts),
      previous=tokens.at[:, :length].set(before),
      end_index=(prompt_lengths - 1).astype(jnp.int32),
      last_feature=jnp.zeros((batch, self.vocab_size), jnp.float32),
    )
    return state, pending.astype(jnp.int32)

  def extend(self, state: MarkovFeatureState, tokens, num_valid, features=None):
    batch, k = tokens.shape
    if features is None:
      if k != 1:
        raise ValueError("without features, one token per row")
      features = state.last_feature[:, None]
    positions = state.end_index[:, None] + jnp.arange(k, dtype=jnp.int32)  # [batch, k]
    rows = jnp.arange(batch)[:, None]
    named = jnp.argmax(features, axis=-1).astype(jnp.int32)  # [batch, k]: zeros name 0
    cache = state.tokens.at[rows, positions].set(tokens.astype(jnp.int32), mode="drop")
    previous = state.previous.at[rows, positions].set(named, mode="drop")
    broken = jnp.pad(previous[:, 1:] != cache[:, :-1], ((0, 0), (1, 0)))  # [batch, capacity]
    broken_before = jnp.cumsum(broken, axis=1)  # entries 1..i inconsistent, counted
    consistent = jnp.take_along_axis(broken_before, positions, axis=1) == 0  # [batch, k]
    context = jnp.where(consistent, named, (named + 1) % self.vocab_size)
    logits = self.logits_table[context, tokens]  # [batch, k, vocab]
    outputs = jax.nn.one_hot(tokens, self.vocab_size)
    last = jnp.maximum(num_valid - 1, 0)[:, None, None]
    last_output = jnp.take_along_axis(outputs, last, axis=1)[:, 0]
    return logits, MarkovFeatureState(
      tokens=cache,
      previous=previous,
      end_index=state.end_index + num_valid.astype(jnp.int32),
      last_feature=jnp.where((num_valid > 0)[:, None], last_output, state.last_feature),
    )

  def rewind(self, state: MarkovFeatureState, end_index: jax.Array) -> MarkovFeatureState:
    return state.replace(end_index=end_index.astype(jnp.int32))
