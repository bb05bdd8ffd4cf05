"""`FeatureDraft`: a feature-level draft (Li et al. 2024, "EAGLE"): one decoder layer that
reads the target's features instead of only its tokens.

The target's feature at position j (its final-normed hidden state, the output layer's
input) predicts token j + 1. The draft's input at position j is the pair (feature j - 1,
token j) — the target's feature where the target has scored the text, the draft's own
prediction of it inside a drafted block — fused by one linear map, then one decoder layer
of the target's shape; its output is the draft's prediction of feature j, and the target's
own output rows (for a reduced vocabulary) turn it into logits. The features of committed
text come from the target's verify call, so the draft sees what the target computed.

With `config.feature_layers` (EAGLE-3's fusion) the target's features also carry the
outputs of those of its layers (low and middle ones) before the final-normed state:
[d * (n + 1)]. The draft RMS-normalises each layer output (no scale), and one more linear
map (`reduce`, [d * (n + 1)] -> [d]) turns the target's features into one d-wide feature;
inside a drafted block the draft's own outputs (d wide) take its place. `with_fusion`
makes such a draft from one that reads the final state alone, computing what it did.

Behind the model contract with two additions (`uses_target_features`): `init_state` and
`extend` take the target's features of the positions before their tokens. Without them
(`features=None`), `extend` takes ONE token per row and pairs it with the draft's own last
output (a drafting step), and `init_state` pairs the prompt with zeros (for timing only:
its proposals then ignore the target). The speculative loop passes the target's features
(decoding.speculative); a feature draft never changes what is accepted, only how much.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax import struct

from specsample.core.contract import GreedyTokens
from specsample.models import prefill
from specsample.models.decoder_only.config import DecoderOnlyConfig
from specsample.models.decoder_only.network import Block, empty_caches
from specsample.models.kv_cache import KVCache, causal_mask
from specsample.models.layers import (
  Embed,
  Projection,
  dense_transposed,
  greedy_transposed,
  lookup,
  stored_blocks,
)
from specsample.models.weights import read_weights


def previous_features(features: jax.Array) -> jax.Array:
  """The feature paired with each token: position j gets feature j - 1 (zeros at 0).
  [batch, length, d] -> [batch, length, d]."""
  return jnp.pad(features, ((0, 0), (1, 0), (0, 0)))[:, :-1]


class FeatureDraftNetwork(nn.Module):
  """config: the target's shape for the layer(s) (d_model, heads, MLP), num_layers of the
  draft (1), output_vocab_size (its reduced vocabulary, `output_ids`)."""

  config: DecoderOnlyConfig

  def setup(self):
    c, dtype = self.config, jnp.dtype(self.config.dtype)
    self.embed = Embed(c.vocab_size, c.d_model, dtype=dtype, param_dtype=dtype)
    self.fuse = Projection(c.d_model, dtype=dtype, use_bias=True)  # [2 d] -> [d]
    if c.feature_layers:  # [d * (n + 1)] -> [d]: the target's fused layers
      self.reduce = Projection(c.d_model, dtype=dtype)
    self.blocks = [Block(c) for _ in range(c.num_layers)]
    # The target's output rows of the kept tokens, [output_vocab, d] (tied layout); in
    # the target's blocks when the target keeps its embedding in blocks.
    shape = (c.output_vocab_size, c.d_model)
    stored = stored_blocks(self, "output_embedding", shape)
    if stored is None:
      stored = self.param("output_embedding", nn.initializers.normal(c.d_model**-0.5), shape, dtype)
    self.output_embedding = stored
    self.output_ids = self.param(
      "output_ids", lambda _, shape: jnp.arange(shape[0], dtype=jnp.int32), (c.output_vocab_size,)
    )

  def reduced(self, features):
    """The target's features [..., d * (n + 1)] -> [..., d]: its layer outputs
    RMS-normalised, with the final state, through `reduce`; d-wide features (the draft's
    own outputs, or a draft without fused layers) pass unchanged."""
    c = self.config
    if features.shape[-1] == c.d_model:
      return features
    if features.shape[-1] != c.feature_size:
      raise ValueError(f"features must be {c.d_model} or {c.feature_size} wide: {features.shape}")
    *layers, final = jnp.split(features, len(c.feature_layers) + 1, axis=-1)
    normed = [
      x * jax.lax.rsqrt(jnp.mean(jnp.square(x), axis=-1, keepdims=True) + c.layer_norm_epsilon)
      for x in layers
    ]
    return self.reduce(jnp.concatenate([*normed, final], axis=-1))

  def predict_features(self, tokens, features, positions, caches, end_index, allowed=None):
    """tokens int32[batch, k] with the features before them [batch, k, d] (the draft's
    own) or [batch, k, feature_size] (the target's) at positions int32[batch, k] ->
    (predicted features [batch, k, d], caches). allowed bool[batch, k, capacity]: the
    cache entries each token sees (None: causal by position)."""
    c = self.config
    x = lookup(self.embed, tokens, jnp.dtype(c.dtype))  # [batch, k, d]
    features = self.reduced(features.astype(x.dtype))  # [batch, k, d]
    x = self.fuse(jnp.concatenate([x, features], axis=-1))
    if allowed is None:
      allowed = causal_mask(positions, caches[0][0].shape[1], c.sliding_window)
    new_caches = []
    for block, cache in zip(self.blocks, caches, strict=True):
      x, cache = block(x, positions, cache, end_index, allowed)
      new_caches.append(cache)
    return x, tuple(new_caches)

  def kept_logits(self, x):
    """Logits of the kept tokens: [..., d] -> [..., output_vocab] (`output_ids` order)."""
    return dense_transposed(x, self.output_embedding)

  def __call__(self, tokens, features, positions, caches, end_index):
    """`predict_features`, and the logits over the whole vocabulary: -> (logits
    float32[batch, k, vocab] (-inf outside `output_ids`), caches, features [batch, k, d])."""
    c = self.config
    x, new_caches = self.predict_features(tokens, features, positions, caches, end_index)
    kept = self.kept_logits(x)  # [batch, k, output_vocab]
    logits = jnp.full((*kept.shape[:-1], c.vocab_size), -jnp.inf, jnp.float32)
    logits = logits.at[..., self.output_ids].set(kept.astype(jnp.float32))
    return logits, new_caches, x

  def greedy(self, tokens, features, positions, caches, end_index):
    """`__call__`'s `GreedyTokens` ([batch, k] each) without the whole vocabulary's
    logits: -> (GreedyTokens, caches, features [batch, k, d]). The same tokens, ties
    included, as `output_ids` is increasing (`load_feature_draft`)."""
    x, new_caches = self.predict_features(tokens, features, positions, caches, end_index)
    kept = greedy_transposed(x, self.output_embedding)  # of [batch, k, output_vocab] logits
    return kept._replace(tokens=self.output_ids[kept.tokens]), new_caches, x


@struct.dataclass
class FeatureDraftState(KVCache):
  """The layers' cache (`caches`: per layer keys and values [batch, capacity, kv_heads,
  head_dim]; `end_index` int32[batch]) and the draft's last output."""

  last_feature: jax.Array  # float32[batch, d_model]: the draft's output at end_index - 1


@struct.dataclass
class FeatureDraft:
  """A feature-level draft with its parameters (model contract + target features)."""

  params: Any
  config: DecoderOnlyConfig = struct.field(pytree_node=False)
  # Static: prompt arrays padded past their longest row are prefilled in passes
  # (`models.prefill.for_padded_prompts`).
  padded_prefill: bool = struct.field(pytree_node=False, default=False)

  uses_target_features = True  # the speculative loop passes the target's features

  @classmethod
  def init_random(cls, config: DecoderOnlyConfig, seed: int = 0) -> FeatureDraft:
    """Random parameters (tests, and the start of training)."""
    network = FeatureDraftNetwork(config)
    tokens = jnp.zeros((1, 1), jnp.int32)
    features = jnp.zeros((1, 1, config.feature_size), jnp.dtype(config.dtype))
    caches = empty_caches(config, 1, 1)
    params = network.init(jax.random.key(seed), tokens, features, tokens, caches, tokens[:, 0])
    return cls(params=params["params"], config=config)

  @property
  def vocab_size(self) -> int:
    return self.config.vocab_size

  @property
  def eos_id(self):
    return self.config.eos_id

  @property
  def pad_id(self) -> int:
    return self.config.pad_id

  @property
  def feature_size(self) -> int:
    """The width of the target features it reads (d_model, times the fused layers + 1)."""
    return self.config.feature_size

  def _run(self, state: KVCache, tokens, features, method="__call__"):
    """tokens int32[batch, k] with features [batch, k, d], written at each row's end ->
    (logits [batch, k, vocab] (method "greedy": `GreedyTokens`), the state
    with them written; its end index unmoved, predicted features [batch, k, d])."""
    positions = state.end_index[:, None] + jnp.arange(tokens.shape[1], dtype=jnp.int32)
    logits, caches, outputs = FeatureDraftNetwork(self.config).apply(
      {"params": self.params}, tokens, features, positions, state.caches, state.end_index,
      method=method,
    )  # fmt: skip
    return logits, state.replace(caches=caches), outputs

  def _empty(self, batch: int, capacity: int) -> FeatureDraftState:
    return FeatureDraftState(
      caches=empty_caches(self.config, batch, capacity),
      end_index=jnp.zeros((batch,), jnp.int32),
      last_feature=jnp.zeros((batch, self.config.d_model), jnp.float32),
    )

  def init_state(
    self,
    prompts: jax.Array,
    prompt_lengths: jax.Array,
    num_new_positions: int,
    features: jax.Array | None = None,
  ) -> tuple[FeatureDraftState, jax.Array]:
    """Prefills every prompt token but the last, each paired with the target's feature
    of the position before it; features [batch, length, d] are the target's features of
    the prompt positions (`init_state_with_features`). The last prompt token is pending:
    the speculative loop pairs it with feature length - 2 in its first catch-up."""
    batch, length = prompts.shape
    if features is None:
      features = jnp.zeros((batch, length, self.feature_size), jnp.float32)
    if features.shape != (batch, length, self.feature_size):
      raise ValueError(
        f"features must be [batch, length, {self.feature_size}] = "
        f"{(batch, length, self.feature_size)}, got {features.shape}"
      )
    state = self._empty(batch, length + num_new_positions)
    paired = previous_features(features)  # [batch, length, d]

    def one_pass(state):
      return self._run(state, prompts, paired)[1], None

    def run_pass(state, start):  # positions start .. start + PREFILL_CHUNK - 1 (`models.prefill`)
      chunk = prefill.PREFILL_CHUNK
      tokens = jax.lax.dynamic_slice_in_dim(prompts, start, chunk, axis=1)
      inputs = jax.lax.dynamic_slice_in_dim(paired, start, chunk, axis=1)
      return self._run(state, tokens, inputs)[1], None

    state, _ = prefill.prefill(
      one_pass, run_pass, state, length, prompt_lengths, self.padded_prefill
    )
    pending = jnp.take_along_axis(prompts, (prompt_lengths - 1)[:, None], axis=1)[:, 0]
    return state.rewind(prompt_lengths - 1), pending.astype(jnp.int32)

  def extend(
    self,
    state: FeatureDraftState,
    tokens: jax.Array,
    num_valid: jax.Array,
    features: jax.Array | None = None,
  ) -> tuple[jax.Array, FeatureDraftState]:
    """tokens int32[batch, k], each paired with features [batch, k, d] (the target's
    feature of the position before it); features=None: one token per row, paired with
    the draft's own last output. -> (logits [batch, k, vocab], state); the state keeps the
    output at each row's last valid token as the next drafting step's feature."""
    return self._extend(state, tokens, num_valid, features, "__call__")

  def extend_greedy(
    self,
    state: FeatureDraftState,
    tokens: jax.Array,
    num_valid: jax.Array,
    features: jax.Array | None = None,
  ) -> tuple[GreedyTokens, FeatureDraftState]:
    """`extend`'s `GreedyTokens` ([batch, k] each; `GreedyDraft`) from the reduced
    vocabulary's logits alone, and the same state."""
    return self._extend(state, tokens, num_valid, features, "greedy")

  def _extend(self, state: FeatureDraftState, tokens, num_valid, features, method):
    if features is None:
      if tokens.shape[1] != 1:
        raise ValueError(
          "a feature draft's extend without features takes one token per row (a drafting "
          f"step), got {tokens.shape[1]}: pass the target's features for more"
        )
      features = state.last_feature[:, None]
    result, new_state, outputs = self._run(state, tokens, features, method)
    last = jnp.maximum(num_valid - 1, 0)[:, None, None]  # [batch, 1, 1]
    last_output = jnp.take_along_axis(outputs, last, axis=1)[:, 0].astype(jnp.float32)
    last_feature = jnp.where((num_valid > 0)[:, None], last_output, state.last_feature)
    return result, new_state.replace(last_feature=last_feature).advance(num_valid)

  def rewind(self, state: FeatureDraftState, end_index: jax.Array) -> FeatureDraftState:
    """Moves the end index (O(1)); the next extend must pass the target's features (the
    kept last feature belongs to the old end)."""
    return state.rewind(end_index)

  def weights_per_call(self) -> tuple[int, int]:
    """(count, bytes): the fusing map, the layer(s) and the reduced output layer (the
    input embedding's rows are gathered)."""
    return read_weights(self.params, skip=lambda path: path[0] in ("embed", "output_ids"))

  def forward(self, tokens: jax.Array, features: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Whole sequences in one pass (training and parity): tokens int32[batch, length] with
    the target's features of the same positions [batch, length, feature_size] (feature j predicts
    token j + 1) -> (logits [batch, length, vocab], predicted features [batch, length, d]):
    position j's prediction of feature j from features < j and tokens <= j."""
    batch, length = tokens.shape
    logits, _, outputs = self._run(self._empty(batch, length), tokens, previous_features(features))
    return logits, outputs


def feature_draft_config(target_config: DecoderOnlyConfig, output_vocab_size: int, **changes):
  """The draft's config for a target: the target's layer shape, one layer, a reduced
  output vocabulary; `changes` override (e.g. num_layers=2)."""
  settings = {"num_layers": 1, **changes}
  return dataclasses.replace(
    target_config, output_vocab_size=output_vocab_size, tie_word_embeddings=False, **settings
  )


def with_fusion(draft: FeatureDraft, layers) -> FeatureDraft:
  """`draft` (reading its target's final state alone) reading the outputs of the target's
  `layers` too (EAGLE-3's fusion): `reduce` starts as the map that keeps the final state,
  so the new draft proposes exactly what `draft` did until it is trained further."""
  if draft.config.feature_layers:
    raise ValueError(f"the draft fuses layers {draft.config.feature_layers} already")
  config = draft.config.replace(feature_layers=tuple(layers))
  if not config.feature_layers:
    raise ValueError("give the target layers to fuse, e.g. (2, 15)")
  d = config.d_model
  kernel = jnp.zeros((config.feature_size, d), jnp.dtype(config.dtype))
  kernel = kernel.at[-d:].set(jnp.eye(d, dtype=kernel.dtype))  # [d * (n + 1), d]
  return FeatureDraft(params={**draft.params, "reduce": {"kernel": kernel}}, config=config)
