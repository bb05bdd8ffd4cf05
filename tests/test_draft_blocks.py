"""A token-level draft's float32 matrices kept in Q8_0 blocks (`with_q8_0_draft`): the
blocks are llama.cpp's Q8_0 of the weights, the draft's logits stay close, and speculative
greedy output is still the target's."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from specsample import SamplingConfig, generate, speculative_generate
from specsample.kernels import int8_blocks, native
from specsample.models.decoder_only import DecoderOnly, DecoderOnlyConfig
from specsample.models.weights import q8_0_blocks, with_q8_0_draft

CONFIG = DecoderOnlyConfig(
  vocab_size=96, d_model=64, num_heads=4, num_kv_heads=2, head_dim=16, mlp_dim=128,
  num_layers=2, eos_id=2,
)  # fmt: skip


def test_q8_0_blocks_are_llama_cpp_s():
  rng = np.random.default_rng(0)
  w = rng.standard_normal((5, 64)).astype(np.float32)
  w[1, :32] = 0.0  # an all-zero block: scale 0, values 0
  blocks = q8_0_blocks(w)
  assert blocks.shape == (5, 2 * 34) and blocks.dtype == np.uint8
  d = blocks.reshape(5, 2, 34)[:, :, :2].copy().view(np.float16).astype(np.float32)  # [5, 2, 1]
  q = blocks.reshape(5, 2, 34)[:, :, 2:].copy().view(np.int8).astype(np.float32)
  np.testing.assert_array_equal(d[:, :, 0], np.float16(np.abs(w.reshape(5, 2, 32)).max(-1) / 127))
  assert np.abs(q).max() <= 127 and np.all(q[1, 0] == 0)
  np.testing.assert_allclose((q * d).reshape(5, 64), w, atol=float(d.max()) * 0.51)
  dequantized = int8_blocks.dequantize(int8_blocks.from_gguf_blocks(blocks, "q8_0"))
  np.testing.assert_allclose(np.asarray(dequantized), (q * d).reshape(5, 64), rtol=1e-6)


@pytest.mark.skipif(not native.kernel_available(), reason=str(native.why_not_available()))
def test_a_draft_in_blocks_stays_close_and_greedy_output_stays_the_targets():
  target = DecoderOnly.init_random(CONFIG, seed=0)
  draft = jax.tree.map(lambda w: w + 0.01 * jax.random.normal(jax.random.key(1), w.shape), target)
  blocked = with_q8_0_draft(draft)
  kinds = {type(leaf).__name__ for leaf in jax.tree.leaves(
    blocked.params, is_leaf=lambda x: isinstance(x, int8_blocks.Int8BlockMatrix)
  )}  # fmt: skip
  assert "Int8BlockMatrix" in kinds
  tokens = np.array([[5, 6, 7, 8, 9, 10]], np.int32)
  near, exact = np.asarray(blocked.forward(tokens)), np.asarray(draft.forward(tokens))
  assert np.abs(near - exact).max() < 0.05 * np.abs(exact).max()  # 8-bit weights: close
  assert np.mean(near.argmax(-1) == exact.argmax(-1)) > 0.8
  prompts = [[5, 6, 7], [9, 10, 11, 12], [14]]
  greedy = SamplingConfig(0.0)
  plain = generate(target, prompts, max_new_tokens=12, sampling=greedy)
  spec = speculative_generate(target, blocked, prompts, gamma=3, max_new_tokens=12, sampling=greedy)
  assert spec.sequences() == plain.sequences()
  unblocked = speculative_generate(
    target, draft, prompts, gamma=3, max_new_tokens=12, sampling=greedy
  )  # the blocked draft agrees with the target about as often as the float32 one
  assert spec.stats.tokens_per_target_call > 1.5
  assert spec.stats.tokens_per_target_call > 0.8 * unblocked.stats.tokens_per_target_call
