"""Tiny GGUF files and GGUF block matrices, with the model checks the block-kernel tests share."""

from __future__ import annotations

import os

import gguf
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q

from specsample import SamplingConfig, generate, speculative_generate
from specsample.kernels import blocks, native
from specsample.models.decoder_only import DecoderOnly, DecoderOnlyConfig

# Tiny llama shapes per block size: K-quants pack 256 values per block, so their rows are
# 256 long; the others use d_model 64.
SMALL = dict(d=64, heads=4, kv=2, head_dim=16, ffn=128, vocab=96)
LARGE = dict(d=256, heads=4, kv=2, head_dim=64, ffn=512, vocab=40)
K_QUANT_SCALES = {"Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,)}  # byte offsets of f16 scales


def permute(w: np.ndarray, heads: int) -> np.ndarray:
  """llama.cpp's converter: Q/K rows per head [2, half] -> [half, 2] (interleaved rotary)."""
  return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def hf_shapes(s: dict, layers: int = 2, tied: bool = True) -> dict[str, tuple[int, ...]]:
  q, kv = s["heads"] * s["head_dim"], s["kv"] * s["head_dim"]
  shapes = {"token_embd.weight": (s["vocab"], s["d"]), "output_norm.weight": (s["d"],)}
  if not tied:
    shapes["output.weight"] = (s["vocab"], s["d"])
  for i in range(layers):
    shapes |= {
      f"blk.{i}.attn_norm.weight": (s["d"],),
      f"blk.{i}.attn_q.weight": (q, s["d"]),
      f"blk.{i}.attn_k.weight": (kv, s["d"]),
      f"blk.{i}.attn_v.weight": (kv, s["d"]),
      f"blk.{i}.attn_output.weight": (s["d"], q),
      f"blk.{i}.ffn_norm.weight": (s["d"],),
      f"blk.{i}.ffn_gate.weight": (s["ffn"], s["d"]),
      f"blk.{i}.ffn_up.weight": (s["ffn"], s["d"]),
      f"blk.{i}.ffn_down.weight": (s["d"], s["ffn"]),
    }
  return shapes


def random_blocks(rng, rows: int, cols: int, qtype) -> np.ndarray:
  """Valid raw K-quant blocks: random bits with finite float16 scales. [rows, bytes]"""
  block, size = gguf.GGML_QUANT_SIZES[qtype]
  raw = rng.integers(0, 256, (rows, cols // block, size), dtype=np.uint8)
  for offset in K_QUANT_SCALES[qtype.name]:
    scale = rng.uniform(0.001, 0.01, (rows, cols // block)).astype(np.float16)
    raw[:, :, offset : offset + 2] = scale.view(np.uint8).reshape(rows, cols // block, 2)
  return raw.reshape(rows, -1)


def write_tiny(
  path,
  qtype=Q.F32,
  *,
  s=SMALL,
  arch="llama",
  skip=(),
  extra=None,
  metadata=None,
  strings=None,
  floats=None,
  as_int32=(),
  seed=0,
):
  """Writes a 2-layer GGUF with weights of type `qtype` (1-D tensors F32). Returns (stored,
  sources): {gguf name: the values stored, numpy order, exactly what dequantizing the bytes
  gives (Q/K rows permuted for llama)}, and {gguf name: the HF-order weights before
  permutation and quantization} (not for K-quants, whose blocks are random bits)."""
  rng = np.random.default_rng(seed)
  writer = gguf.GGUFWriter(os.fspath(path), arch)
  writer.add_name("tiny test model")
  meta = {
    "block_count": 2,
    "context_length": 128,
    "embedding_length": s["d"],
    "feed_forward_length": s["ffn"],
    "attention.head_count": s["heads"],
    "attention.head_count_kv": s["kv"],
    "rope.dimension_count": s["head_dim"],
    "vocab_size": s["vocab"],
  } | (metadata or {})
  for key, value in meta.items():
    writer.add_uint32(f"{arch}.{key}", value)
  writer.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", 1e-5)
  writer.add_float32(f"{arch}.rope.freq_base", 10000.0)
  for key, value in (strings or {}).items():
    writer.add_string(key, value)
  for key, value in (floats or {}).items():
    writer.add_float32(key, value)
  writer.add_uint32("tokenizer.ggml.bos_token_id", 1)
  writer.add_uint32("tokenizer.ggml.eos_token_id", 2)
  stored, sources = {}, {}
  shapes = hf_shapes(s) | (extra or {})
  if arch == "qwen2":
    for i in range(2):
      shapes |= {f"blk.{i}.attn_{p}.bias": (shapes[f"blk.{i}.attn_{p}.weight"][0],) for p in "qkv"}
  if arch == "qwen3":
    for i in range(2):
      shapes |= {f"blk.{i}.attn_{p}_norm.weight": (s["head_dim"],) for p in "qk"}
  for name, shape in shapes.items():
    if name in skip:
      continue
    if len(shape) == 1 or qtype == Q.F32:
      values = rng.normal(size=shape).astype(np.float32)
      if arch == "llama" and (".attn_q." in name or ".attn_k." in name):
        heads = s["kv"] if ".attn_k." in name else s["heads"]
        sources[name], values = values, permute(values, heads)
      if name in as_int32:
        values = np.round(values).astype(np.int32)
      writer.add_tensor(name, values)
      stored[name] = values
      continue
    if qtype.name in K_QUANT_SCALES:
      raw = random_blocks(rng, shape[0], shape[1], qtype)
    else:
      values = rng.normal(size=shape).astype(np.float32)
      if arch == "llama" and (".attn_q." in name or ".attn_k." in name):
        heads = s["kv"] if ".attn_k." in name else s["heads"]
        sources[name], values = values, permute(values, heads)
      sources.setdefault(name, values)
      raw = gguf.quants.quantize(values, qtype)
    if raw.dtype == np.uint8:
      writer.add_tensor(name, raw, raw_dtype=qtype)
    else:
      writer.add_tensor(name, raw)
    stored[name] = gguf.quants.dequantize(raw, qtype).reshape(shape)
  writer.write_header_to_file()
  writer.write_kv_data_to_file()
  writer.write_tensors_to_file()
  writer.close()
  return stored, sources


FORMATS = {
  "q8_0": Q.Q8_0,
  "q4_0": Q.Q4_0,
  "q4_1": Q.Q4_1,
  "q5_0": Q.Q5_0,
  "q4_k": Q.Q4_K,
  "q6_k": Q.Q6_K,
}
GREEDY = SamplingConfig(temperature=0.0)
requires_kernel = pytest.mark.skipif(
  not native.kernel_available(), reason=str(native.why_not_available())
)


def quantized(rng, n: int, d: int, format: str) -> tuple[blocks.BlockMatrix, np.ndarray]:
  """A random [n, d] matrix quantized by the gguf package (random bits with small finite
  float16 scales for the K-quants, which it cannot quantize): (blocks, their float32 values
  by the gguf package)."""
  qtype = FORMATS[format]
  if qtype.name in K_QUANT_SCALES:
    per_row = d // blocks.BLOCK_WEIGHTS[format]
    raw = rng.integers(0, 256, (n, per_row, blocks.BLOCK_BYTES[format]), dtype=np.uint8)
    for offset in K_QUANT_SCALES[qtype.name]:
      halves = rng.uniform(1e-3, 2e-2, (n, per_row)).astype(np.float16)
      raw[..., offset : offset + 2] = halves.view(np.uint8).reshape(n, per_row, 2)
    raw = raw.reshape(n, -1)
  else:
    raw = gguf.quants.quantize(rng.standard_normal((n, d)).astype(np.float32), qtype)
  values = gguf.quants.dequantize(raw, FORMATS[format]).reshape(n, d).astype(np.float32)
  return blocks.from_numpy(raw, format), values


def write_tiny_blocks(path, qtype, *, seed=0) -> dict:
  """write_tiny in `qtype` at the tiny shape its blocks fit (LARGE for the K-quants, whose
  rows hold 256 weights; SMALL for the others). -> that shape."""
  shape = LARGE if qtype.name in K_QUANT_SCALES else SMALL
  write_tiny(path, qtype, s=shape, seed=seed)
  return shape


def logits_beside(model, reference, vocab: int) -> tuple[np.ndarray, np.ndarray]:
  """extend_logits of `model` and of `reference` on the same random tokens [2, 5] of a
  `vocab`-token vocabulary."""
  tokens = jnp.asarray(np.random.default_rng(4).integers(3, vocab, (2, 5)), jnp.int32)
  return extend_logits(model, tokens), extend_logits(reference, tokens)


def extend_logits(model, tokens) -> np.ndarray:
  """The logits of `tokens` [batch, n] extended after a prompt of six 1s (one jit call)."""
  prompts = jnp.ones((tokens.shape[0], 6), jnp.int32)
  lengths = jnp.full((tokens.shape[0],), 6, jnp.int32)

  @jax.jit
  def run(model, tokens):
    state, _ = model.init_state(prompts, lengths, 32)
    return model.extend(state, tokens, jnp.zeros((tokens.shape[0],), jnp.int32))[0]

  return np.asarray(run(model, tokens))


def tiny_draft(vocab: int) -> DecoderOnly:
  """A random one-layer draft of `vocab` tokens, for speculative decoding of the tiny GGUFs."""
  return DecoderOnly.init_random(
    DecoderOnlyConfig(
      vocab_size=vocab, d_model=32, num_heads=2, num_kv_heads=1, head_dim=16,
      mlp_dim=64, num_layers=1, tie_word_embeddings=True, eos_id=2, pad_id=0,
    ),
    seed=6,
  )  # fmt: skip


def speculative_and_plain(model, vocab: int, gammas=(3,)) -> None:
  """Speculative greedy output (a random tiny draft, each of `gammas`) equals plain greedy
  output of the model's arithmetic, on three prompts of different lengths."""
  draft = tiny_draft(vocab)
  rng = np.random.default_rng(7)
  prompts = jnp.asarray(rng.integers(3, vocab, (3, 8)), jnp.int32)
  common = dict(
    prompt_lengths=jnp.asarray([8, 3, 6], jnp.int32), max_new_tokens=20, sampling=GREEDY
  )
  plain = generate(model, prompts, **common).sequences()
  for gamma in gammas:
    spec = speculative_generate(model, draft, prompts, gamma=gamma, **common).sequences()
    assert spec == plain, gamma
