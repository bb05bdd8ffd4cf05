"""`NGramDraft`: prompt-lookup drafting (Saxena 2023; HF `prompt_lookup_num_tokens`,
llama.cpp `lookup`) as a model behind the contract, so it runs inside the compiled loop.

At every position it proposes the token that followed the latest earlier occurrence of
the last n tokens (prompt and output so far), for the largest n in max_ngram..min_ngram
that occurs; with no occurrence it proposes the last token again. The proposal is
deterministic: its "distribution" is one-hot (logit 0 at the proposal, -inf elsewhere),
so token-wise verification accepts it with probability q(x) and stays exact, and greedy
output stays the target's.

The cache is the token history: int32[batch, capacity], written at each row's end index
like any model's, so rewinding works as everywhere else. A call costs a few comparisons
per cached position: no weights, no host round trip.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct


def one_hot_logits(proposals: jax.Array, vocab_size: int) -> jax.Array:
  """Logits float32[..., vocab] of a deterministic proposal int32[...]: 0 there, -inf
  elsewhere (probability 1 on the proposal after any temperature or top-k/top-p)."""
  vocab = jnp.arange(vocab_size, dtype=jnp.int32)
  return jnp.where(vocab == proposals[..., None], 0.0, -jnp.inf).astype(jnp.float32)


@struct.dataclass
class NGramState:
  """A token history, the whole cache of a model that reads back only the tokens fed so
  far (NGramDraft's; the toy MarkovLM's too)."""

  tokens: jax.Array  # int32[batch, capacity]: every token fed so far, per row
  end_index: jax.Array  # int32[batch]: valid positions per row

  @classmethod
  def of_prompts(
    cls, prompts: jax.Array, prompt_lengths: jax.Array, num_new_positions: int
  ) -> tuple[NGramState, jax.Array]:
    """(the history of `prompts` with room for `num_new_positions` more tokens, each row's
    last prompt token, pending): a model contract's `init_state`."""
    batch, length = prompts.shape
    tokens = jnp.zeros((batch, length + num_new_positions), jnp.int32)
    tokens = tokens.at[:, :length].set(prompts.astype(jnp.int32))
    last = prompt_lengths.astype(jnp.int32) - 1  # [batch]
    pending = jnp.take_along_axis(tokens, last[:, None], axis=1)[:, 0]
    return cls(tokens=tokens, end_index=last), pending


@struct.dataclass
class NGramDraft:
  """A drafting 'model' over `vocab_size` tokens (use the target's: `for_target`)."""

  vocab_size: int = struct.field(pytree_node=False)
  eos_id: int | tuple[int, ...] | None = struct.field(pytree_node=False, default=None)
  pad_id: int = struct.field(pytree_node=False, default=0)
  max_ngram: int = struct.field(pytree_node=False, default=3)
  min_ngram: int = struct.field(pytree_node=False, default=1)

  def __post_init__(self):
    if not 1 <= self.min_ngram <= self.max_ngram:
      raise ValueError(
        f"need 1 <= min_ngram <= max_ngram, got min_ngram={self.min_ngram}, "
        f"max_ngram={self.max_ngram}"
      )

  @classmethod
  def for_target(cls, target, *, max_ngram: int = 3, min_ngram: int = 1) -> NGramDraft:
    return cls(target.vocab_size, target.eos_id, target.pad_id, max_ngram, min_ngram)

  # The contract's init_state: the prompts' token history and their last tokens, pending.
  init_state = staticmethod(NGramState.of_prompts)

  def extend(
    self, state: NGramState, tokens: jax.Array, num_valid: jax.Array
  ) -> tuple[jax.Array, NGramState]:
    """Writes tokens int32[batch, k] at each row's end; one-hot logits [batch, k, vocab]
    at the proposal after each of them."""
    proposals, _, new_state = self.lookup(state, tokens, num_valid)  # [batch, k]
    return one_hot_logits(proposals, self.vocab_size), new_state

  def lookup(
    self, state: NGramState, tokens: jax.Array, num_valid: jax.Array
  ) -> tuple[jax.Array, jax.Array, NGramState]:
    """Like `extend`, but the proposals int32[batch, k] and the length of the n-gram each
    was found with int32[batch, k] (0: none found, the last token repeated)."""
    k = tokens.shape[1]
    history = jax.vmap(lambda row, new, i: jax.lax.dynamic_update_slice(row, new, (i,)))(
      state.tokens, tokens.astype(jnp.int32), state.end_index
    )  # [batch, capacity]
    positions = state.end_index[:, None] + jnp.arange(k, dtype=jnp.int32)  # [batch, k]
    proposals, lengths = jax.vmap(self._propose)(history, positions)  # [batch, k] each
    new_state = NGramState(tokens=history, end_index=state.end_index + num_valid)
    return proposals, lengths, new_state

  def weights_per_call(self) -> tuple[int, int]:
    """No weights: proposals come from the token history."""
    return 0, 0

  def rewind(self, state: NGramState, end_index: jax.Array) -> NGramState:
    return state.replace(end_index=end_index.astype(jnp.int32))

  def _propose(self, history: jax.Array, positions: jax.Array) -> tuple[jax.Array, jax.Array]:
    """One row: the proposal after each position and the n-gram length it was found with.
    [capacity], int32[k] -> (int32[k], int32[k])."""
    capacity = history.shape[0]
    starts = jnp.arange(capacity, dtype=jnp.int32)  # candidate match ends i
    # matches[n-1][j, i]: the n tokens ending at i equal the n ending at positions[j],
    # with i < positions[j] (an earlier occurrence) and all n tokens inside the row.
    earlier = starts[None, :] < positions[:, None]  # [k, capacity]
    matches, same = [], earlier
    for back in range(self.max_ngram):
      shifted = jnp.roll(history, back)  # shifted[i] = history[i - back]
      current = history[jnp.maximum(positions - back, 0)]  # [k]
      same = same & (shifted[None, :] == current[:, None]) & (starts[None, :] >= back)
      same = same & (positions[:, None] >= back)
      matches.append(same)
    proposal = history[positions]  # no occurrence: repeat the last token
    found = jnp.zeros(positions.shape, bool)
    length = jnp.zeros(positions.shape, jnp.int32)
    for n in range(self.max_ngram, self.min_ngram - 1, -1):  # the longest n-gram wins
      hits = matches[n - 1]  # [k, capacity]
      latest = jnp.max(jnp.where(hits, starts[None, :], -1), axis=1)  # [k]
      use = (latest >= 0) & ~found
      proposal = jnp.where(use, history[jnp.clip(latest + 1, 0, capacity - 1)], proposal)
      length = jnp.where(use, n, length)
      found |= latest >= 0
    return proposal, length
