"""The key/value cache shared by the attention models (models.kv_cache): writes at each
row's own index, rewind, tree paths, masks, and one write per array in a model's call."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from tiny_models import tiny_config

from specsample.models import T5, DecoderOnly, DecoderOnlyConfig, FeatureDraft
from specsample.models.feature_draft import feature_draft_config
from specsample.models.kv_cache import KeysValues, KVCache, causal_mask, zeros

DECODER = DecoderOnlyConfig(
  vocab_size=40, d_model=16, num_heads=2, num_kv_heads=1, head_dim=8, mlp_dim=24, num_layers=2,
)  # fmt: skip


def numbered(batch=2, capacity=6) -> KVCache:
  """Two layers whose entry [b, i] holds 100 * b + i (keys) and minus that (values)."""
  index = 100 * np.arange(batch)[:, None] + np.arange(capacity)[None, :]
  keys = jnp.asarray(np.broadcast_to(index[:, :, None, None], (batch, capacity, 1, 2)), jnp.float32)
  layer = KeysValues(keys, -keys)
  return KVCache(caches=(layer, layer), end_index=jnp.asarray([2, 4], jnp.int32))


def test_write_at_each_rows_index():
  layer = KeysValues.zeros(2, 6, 1, 2, jnp.float32)
  new = jnp.ones((2, 3, 1, 2))
  written = layer.write(new, 2 * new, jnp.asarray([0, 2]))
  np.testing.assert_array_equal(written.keys[:, :, 0, 0], [[1, 1, 1, 0, 0, 0], [0, 0, 1, 1, 1, 0]])
  np.testing.assert_array_equal(written.values[:, :, 0, 0], 2 * written.keys[:, :, 0, 0])
  keys, values = written  # unpacks as the (keys, values) pair it replaces
  assert keys is written[0] and values is written.values


def test_rewind_advance_and_valid():
  cache = numbered()
  assert cache.capacity == 6
  moved = cache.advance(jnp.asarray([1, 0])).rewind(jnp.asarray([5, 1]))
  assert moved.end_index.tolist() == [5, 1] and moved.end_index.dtype == jnp.int32
  assert moved.caches is cache.caches  # nothing copied
  np.testing.assert_array_equal(cache.valid.sum(axis=1), [2, 4])


def test_keep_path_moves_the_slots_and_commits():
  cache = numbered()
  kept = cache.keep_path(jnp.asarray([[0, 2], [1, 1]]), jnp.asarray([2, 1]))
  assert kept.end_index.tolist() == [4, 5]
  for layer in kept.caches:
    np.testing.assert_array_equal(
      layer.keys[:, :, 0, 0], [[0, 1, 2, 4, 4, 5], [100, 101, 102, 103, 105, 105]]
    )
    np.testing.assert_array_equal(layer.values, -layer.keys)


def test_causal_mask():
  mask = causal_mask(jnp.asarray([[1, 2], [4, 5]]), 6, window=3)
  np.testing.assert_array_equal(mask[0].astype(int), [[1, 1, 0, 0, 0, 0], [1, 1, 1, 0, 0, 0]])
  np.testing.assert_array_equal(mask[1].astype(int), [[0, 0, 1, 1, 1, 0], [0, 0, 0, 1, 1, 1]])
  assert causal_mask(jnp.asarray([[5]]), 6).all()


def count_primitive(jaxpr, name: str, ndim: int | None = None) -> int:
  """Occurrences of a primitive (with an `ndim`-dimensional output, if given) in a jaxpr
  and all the jaxprs inside it."""
  count = 0
  for eqn in jaxpr.eqns:
    if eqn.primitive.name == name:
      count += ndim is None or eqn.outvars[0].aval.ndim == ndim
    for param in eqn.params.values():
      for sub in param if isinstance(param, list | tuple) else (param,):
        inner = getattr(sub, "jaxpr", sub)  # a ClosedJaxpr's Jaxpr
        if hasattr(inner, "eqns"):
          count += count_primitive(inner, name, ndim)
  return count


def test_every_attention_model_keeps_a_kv_cache_written_once_per_array():
  """Each layer's keys and values are written by ONE batched update (a vmapped
  dynamic_update_slice, a scatter in the jaxpr), never a loop over rows."""
  prompts, lengths = jnp.asarray([[3, 4, 5], [6, 7, 0]]), jnp.asarray([3, 2])
  tokens, num_valid = jnp.asarray([[1, 2], [3, 4]]), jnp.asarray([2, 1])
  decoder = DecoderOnly.init_random(DECODER)
  draft = FeatureDraft.init_random(feature_draft_config(DECODER, 12))
  features = jnp.zeros((2, 2, DECODER.d_model))
  for model, layers, extra in (
    (T5.init_random(tiny_config(vocab=40)), 2, {}),
    (decoder, DECODER.num_layers, {}),
    (draft, 1, {"features": features}),
  ):
    state, _ = model.init_state(prompts, lengths, 4)
    assert isinstance(state, KVCache) and len(state.caches) == layers
    assert all(isinstance(layer, KeysValues) for layer in state.caches)
    call = functools.partial(type(model).extend, tokens=tokens, num_valid=num_valid, **extra)
    jaxpr = jax.make_jaxpr(call)(model, state)
    # [batch, capacity, heads, head_dim] arrays written: keys and values of each layer
    assert count_primitive(jaxpr.jaxpr, "scatter", ndim=4) == 2 * layers, type(model).__name__
    assert count_primitive(jaxpr.jaxpr, "while") == 0
    _, extended = model.extend(state, tokens, num_valid, **extra)
    np.testing.assert_array_equal(extended.end_index, state.end_index + num_valid)


def test_zeros():
  caches = zeros(3, 2, 5, 4, 8, jnp.bfloat16)
  assert len(caches) == 3 and caches[0].keys.shape == (2, 5, 4, 8)
  assert caches[2].values.dtype == jnp.bfloat16 and caches[1].capacity == 5
