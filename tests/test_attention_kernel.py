"""Cached attention over each query's visible entries (specsample.kernels.attention).

The CPU kernel must equal XLA's masked softmax attention to float32 rounding, read nothing
past a query's last visible entry (a larger cache with junk in it changes nothing), and
compute each query exactly as it would alone. With it, a decoder's verify call over k
tokens gives the same logits, bit for bit, as k plain decoding steps, at any context
length (here 1,100 tokens), so speculative greedy output equals plain greedy output.
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specsample import SamplingConfig, generate, speculative_generate
from specsample.kernels import attention, native
from specsample.models.decoder_only import DecoderOnly, DecoderOnlyConfig

requires_kernel = pytest.mark.skipif(
  not native.kernel_available(), reason=str(native.why_not_available())
)


def _operands(rng, batch, k, heads, kv_heads, head_dim, capacity):
  q = rng.standard_normal((batch, k, heads, head_dim)).astype(np.float32)
  keys = rng.standard_normal((batch, capacity, kv_heads, head_dim)).astype(np.float32)
  values = rng.standard_normal((batch, capacity, kv_heads, head_dim)).astype(np.float32)
  return q, keys, values


@jax.jit
def _kernel(q, keys, values, allowed):
  return attention.cached_attention(q, keys, values, allowed, q.shape[-1] ** -0.5)


@requires_kernel
@pytest.mark.parametrize("heads,kv_heads,head_dim", [(9, 3, 64), (4, 1, 128), (7, 7, 32)])
def test_the_kernel_is_masked_softmax_attention(heads, kv_heads, head_dim, isa):
  rng = np.random.default_rng(0)
  batch, k, capacity = 2, 5, 300
  q, keys, values = _operands(rng, batch, k, heads, kv_heads, head_dim, capacity)
  ends = np.array([37, 250])
  positions = ends[:, None] + np.arange(k)  # causal, and a window of 100 on row 1
  index = np.arange(capacity)[None, None, :]
  allowed = index <= positions[:, :, None]
  allowed[1] &= index[0] > positions[1][:, None] - 100
  allowed[0, 2, 5] = False  # a hole, as tree masks make
  text = jax.jit(attention.cached_attention, static_argnums=4).lower(
    q, keys, values, allowed, 0.125
  )
  assert "specsample_cached_attention" in text.as_text()
  ours = _kernel(q, keys, values, allowed)
  reference = attention.xla_attention(q, keys, values, allowed, head_dim**-0.5)
  np.testing.assert_allclose(ours, reference, rtol=2e-5, atol=2e-6)
  # Each query alone: the same numbers, bit for bit.
  for i in range(k):
    alone = _kernel(q[:, i : i + 1], keys, values, allowed[:, i : i + 1])
    np.testing.assert_array_equal(alone[:, 0], ours[:, i], err_msg=f"query {i}")
  # More capacity, junk past every query's last entry: the same numbers.
  junk = rng.standard_normal((batch, 200, kv_heads, head_dim)).astype(np.float32) * 1e3
  wider = _kernel(
    q,
    np.concatenate([keys, junk], axis=1),
    np.concatenate([values, junk], axis=1),
    np.concatenate([allowed, np.zeros((batch, k, 200), bool)], axis=-1),
  )
  np.testing.assert_array_equal(wider, ours)


@requires_kernel
@pytest.mark.parametrize("heads,kv_heads,head_dim", [(9, 3, 64), (12, 1, 128)])
def test_k_rows_in_one_call_equal_each_row_alone_at_a_long_context(heads, kv_heads, head_dim):
  """k = 1..16 query rows of one sequence (a verify call or a tree) read the cache together:
  the query heads of a cache head go in sets of up to 32, a tile of entries at a time, in
  groups that share each tile's loads. Every row's output equals the row alone, bit for
  bit, whatever k, at a context of 2,100 entries with holes in the masks."""
  rng = np.random.default_rng(heads)
  capacity, start, most = 2200, 2100, 16
  q, keys, values = _operands(rng, 1, most, heads, kv_heads, head_dim, capacity)
  positions = start + np.arange(most)
  allowed = np.arange(capacity)[None, None, :] <= positions[None, :, None]  # [1, 16, capacity]
  allowed[0, 3, 1000:1040] = False
  allowed[0, 11, 7] = False
  alone = [
    np.asarray(_kernel(q[:, i : i + 1], keys, values, allowed[:, i : i + 1]))[:, 0]
    for i in range(most)
  ]
  for k in (2, 3, 5, 8, 11, 16):
    together = np.asarray(_kernel(q[:, :k], keys, values, allowed[:, :k]))
    for i in range(k):
      np.testing.assert_array_equal(together[:, i], alone[i], err_msg=f"k {k}, row {i}")


@requires_kernel
@pytest.mark.parametrize("heads,kv_heads,head_dim", [(9, 3, 64), (4, 1, 128)])
def test_a_bfloat16_cache_is_read_as_its_numbers_widened(heads, kv_heads, head_dim, isa):
  """Keys and values in bfloat16 (half the bytes to read): the kernel widens each number
  as it reads it, so its output equals, bit for bit, the float32 kernel's over the same
  numbers stored widened, for every k and at any context."""
  rng = np.random.default_rng(head_dim)
  batch, k, capacity = 2, 6, 700
  q, keys, values = _operands(rng, batch, k, heads, kv_heads, head_dim, capacity)
  keys16, values16 = jnp.asarray(keys, jnp.bfloat16), jnp.asarray(values, jnp.bfloat16)
  positions = np.array([[650], [40]]) + np.arange(k)
  allowed = np.arange(capacity)[None, None, :] <= positions[:, :, None]
  allowed[0, 1, 100:300] = False
  text = jax.jit(attention.cached_attention, static_argnums=4).lower(
    q, keys16, values16, allowed, 0.125
  )
  assert "specsample_cached_attention" in text.as_text()
  ours = np.asarray(_kernel(q, keys16, values16, allowed))
  widened = _kernel(q, keys16.astype(jnp.float32), values16.astype(jnp.float32), allowed)
  np.testing.assert_array_equal(ours, widened)
  assert not np.array_equal(ours, np.asarray(_kernel(q, keys, values, allowed)))
  reference = attention.xla_attention(q, keys16, values16, allowed, head_dim**-0.5)
  assert reference.dtype == jnp.float32
  np.testing.assert_allclose(ours, reference, rtol=2e-5, atol=2e-6)
  with pytest.raises(Exception, match="must both be float32 or both bfloat16"):
    jax.block_until_ready(attention.kernel_attention(
      q, keys16, jnp.asarray(values), allowed, attention.ends_of(allowed), 0.125
    ))  # fmt: skip


@requires_kernel
def test_a_query_that_sees_nothing_gets_zeros():
  q, keys, values = _operands(np.random.default_rng(1), 1, 2, 2, 1, 16, 8)
  allowed = np.zeros((1, 2, 8), bool)
  allowed[0, 1, :3] = True
  out = np.asarray(_kernel(q, keys, values, allowed))
  assert not out[0, 0].any() and np.isfinite(out).all() and out[0, 1].any()


def test_bad_operands_are_refused():
  q, keys, values = _operands(np.random.default_rng(2), 1, 2, 4, 3, 16, 8)
  with pytest.raises(ValueError, match="4 heads over 3 cache heads"):
    attention.cached_attention(q, keys, values, np.ones((1, 2, 8), bool), 0.25)
  with pytest.raises(ValueError, match="queries"):
    attention.cached_attention(q, keys, values[:, :4], np.ones((1, 2, 8), bool), 0.25)


def test_without_the_kernel_xla_attends(monkeypatch):
  monkeypatch.setenv(native.ENV_VARIABLE, "xla")
  q, keys, values = _operands(np.random.default_rng(3), 1, 2, 2, 1, 16, 8)
  allowed = np.tril(np.ones((2, 8), bool), 5)[None]
  function = jax.jit(lambda *a: attention.cached_attention(*a, 0.25))  # traced anew
  assert "specsample_cached_attention" not in function.lower(q, keys, values, allowed).as_text()
  np.testing.assert_allclose(
    function(q, keys, values, allowed), attention.xla_attention(q, keys, values, allowed, 0.25)
  )


# --- a decoder at a long context ---------------------------------------------------------

CONFIG = DecoderOnlyConfig(
  vocab_size=512, d_model=96, num_heads=9, num_kv_heads=3, head_dim=64, mlp_dim=128,
  num_layers=2, tie_word_embeddings=True, eos_id=None, pad_id=0,
)  # fmt: skip
# Prompt tokens and a block of 8: XLA's attention over such a cache rounds a query
# differently when it is one of 8 than alone (SmolLM2's heads; seen here).
LONG, BLOCK = 1900, 8


@requires_kernel
def test_a_verify_call_equals_plain_steps_bit_for_bit_at_a_long_context():
  model = DecoderOnly.init_random(CONFIG, seed=4)
  rng = np.random.default_rng(5)
  prompt = jnp.asarray(rng.integers(1, CONFIG.vocab_size, (2, LONG)), jnp.int32)
  lengths = jnp.asarray([LONG, LONG - 333], jnp.int32)
  block = jnp.asarray(rng.integers(1, CONFIG.vocab_size, (2, BLOCK)), jnp.int32)

  @jax.jit
  def both(model):
    state, _ = model.init_state(prompt, lengths, 16)
    verify, _ = model.extend(state, block, jnp.full((2,), BLOCK, jnp.int32))  # [2, 8, vocab]
    steps = []
    for i in range(BLOCK):
      logits, state = model.extend(state, block[:, i : i + 1], jnp.ones((2,), jnp.int32))
      steps.append(logits[:, 0])
    return verify, jnp.stack(steps, axis=1)

  verify, steps = both(model)
  np.testing.assert_array_equal(verify, steps)


@requires_kernel
def test_speculative_greedy_equals_plain_greedy_at_a_long_context():
  target = DecoderOnly.init_random(CONFIG, seed=6)
  draft = DecoderOnly.init_random(CONFIG.replace(num_layers=1), seed=7)
  rng = np.random.default_rng(8)
  prompts = jnp.asarray(rng.integers(1, CONFIG.vocab_size, (2, LONG)), jnp.int32)
  common = dict(
    prompt_lengths=jnp.asarray([LONG, 1200], jnp.int32),
    max_new_tokens=24,
    sampling=SamplingConfig(temperature=0.0),
  )
  plain = generate(target, prompts, **common).sequences()
  assert speculative_generate(target, draft, prompts, gamma=3, **common).sequences() == plain


@requires_kernel
def test_a_bfloat16_cache_keeps_verify_calls_and_speculation_exact():
  """A decoder whose caches hold bfloat16 (config.cache_dtype): a verify call equals plain
  steps bit for bit at a long context, and speculative greedy output equals plain greedy
  output; the logits differ from the float32 cache's (the cache really is bfloat16)."""
  config = CONFIG.replace(cache_dtype="bfloat16")
  model = DecoderOnly.init_random(config, seed=4)
  rng = np.random.default_rng(5)
  prompt = jnp.asarray(rng.integers(1, CONFIG.vocab_size, (2, 1300)), jnp.int32)
  lengths = jnp.asarray([1300, 977], jnp.int32)
  block = jnp.asarray(rng.integers(1, CONFIG.vocab_size, (2, BLOCK)), jnp.int32)

  @jax.jit
  def both(model):
    state, _ = model.init_state(prompt, lengths, 16)
    verify, _ = model.extend(state, block, jnp.full((2,), BLOCK, jnp.int32))
    steps = []
    for i in range(BLOCK):
      logits, state = model.extend(state, block[:, i : i + 1], jnp.ones((2,), jnp.int32))
      steps.append(logits[:, 0])
    return verify, jnp.stack(steps, axis=1)

  keys = model.init_state(prompt, lengths, 16)[0].caches[0].keys
  assert keys.dtype.itemsize == 2  # bfloat16 numbers, kept as their bits (kv_cache)
  verify, steps = both(model)
  np.testing.assert_array_equal(verify, steps)
  float32_cache, _ = both(model.replace(config=CONFIG))
  assert not np.array_equal(verify, float32_cache)
  np.testing.assert_allclose(verify, float32_cache, rtol=0.05, atol=0.05)
  draft = DecoderOnly.init_random(CONFIG.replace(num_layers=1), seed=7)
  common = dict(prompt_lengths=lengths, max_new_tokens=24, sampling=SamplingConfig(temperature=0.0))
  plain = generate(model, prompt, **common).sequences()
  assert speculative_generate(model, draft, prompt, gamma=3, **common).sequences() == plain


def test_a_bad_cache_dtype_is_refused():
  with pytest.raises(ValueError, match="cache_dtype must be"):
    CONFIG.replace(cache_dtype="float16")


@requires_kernel
@pytest.mark.parametrize("prefix", [37, 48, 301])
def test_a_tree_path_attends_as_the_same_tokens_in_a_chain_bit_for_bit(prefix):
  """A tree's path lies scattered over its slots (here slots 2, 5, 9, 14 after the prefix,
  other branches between); the same keys and values written contiguously, as a chain
  writes them, give the same output bit for bit (the softmax sums run over the seen
  entries in order, wherever they lie)."""
  rng = np.random.default_rng(prefix)
  heads, kv_heads, head_dim, slots = 9, 3, 64, 16
  path = [2, 5, 9, 14]
  capacity = prefix + slots
  q, keys, values = _operands(rng, 1, len(path), heads, kv_heads, head_dim, capacity)
  tree_allowed = np.zeros((1, len(path), capacity), bool)
  chain_keys, chain_values = keys.copy(), values.copy()
  chain_allowed = np.zeros_like(tree_allowed)
  for depth, slot in enumerate(path):
    tree_allowed[0, depth, :prefix] = True
    tree_allowed[0, depth, [prefix + s for s in path[: depth + 1]]] = True
    chain_keys[0, prefix + depth] = keys[0, prefix + slot]
    chain_values[0, prefix + depth] = values[0, prefix + slot]
    chain_allowed[0, depth, : prefix + depth + 1] = True
  tree = _kernel(q, keys, values, tree_allowed)
  chain = _kernel(q, chain_keys, chain_values, chain_allowed)
  np.testing.assert_array_equal(np.asarray(tree), np.asarray(chain))


@requires_kernel
def test_a_bfloat16_cache_is_written_in_place_in_the_decoding_loop():
  """XLA's CPU compiler computes bfloat16 updates in float32 (the whole cache converted
  there and back: a copy of every layer's cache per step); the cache keeps the numbers'
  bits so that each step writes in place. In the compiled loop no cache-shaped array is
  copied but the zeroed caches going into it, for a bfloat16 cache as for a float32 one."""
  from specsample.decoding.autoregressive import AutoregressiveSettings, generate_program

  prompt = jnp.ones((1, 40), jnp.int32)
  settings = AutoregressiveSettings(max_new_tokens=8, sampling=SamplingConfig(temperature=0.0))
  for cache in ("float32", "bfloat16"):
    model = DecoderOnly.init_random(CONFIG.replace(cache_dtype=cache), seed=1)
    args = (model, prompt, jnp.asarray([40], jnp.int32), jax.random.key(0), settings)
    text = generate_program.lower(*args).compile().as_text()
    copied = re.findall(r"\[1,\d+,3,64\]\{[^}]*\} copy\((\S+)\)", text)  # cache-shaped
    assert all("broadcast" in operand for operand in copied), (cache, copied)
