"""Our Tokenizer against transformers' for the same GGUF file: ids, decoding, chat prompts;
a directory written by transformers; a llama3-style GGUF that adds BOS; bad inputs; user
text never becomes control tokens."""

from __future__ import annotations

import json
import os
import random
import unicodedata

import gguf
import pytest
from tokenizer_files import (
  SMOLLM2,
  needs_smollm2,
  sanitizes,
  theirs_chat_ids,
  write_tokenizer_gguf,
)

from specsample.checkpoints import CheckpointError
from specsample.checkpoints.formats.gguf import read_gguf_metadata
from specsample.checkpoints.tokenizer import PRE_TOKENIZERS, Tokenizer, load_tokenizer

HANDWRITTEN = [
  "",
  " ",
  "Hello, world!",
  "The quick brown fox jumps over the lazy dog.",
  "  leading spaces",
  "trailing spaces   ",
  "a  b   c    d",
  "\n",
  "\n\n\n",
  "line one\nline two\r\nline three\r",
  "tab\tseparated\tvalues",
  "\t\tdouble tab",
  "def f(x):\n    return x * 2\n",
  "if (a && b) {\n\treturn c;\n}\n",
  "for i in range(10):\n        print(i)  # comment",
  "SELECT * FROM users WHERE id = 42;",
  '<html><body class="x">hi</body></html>',
  "0",
  "1234567890",
  "3.14159265358979",
  "-42 +7 1e-5 0x1F 1,000,000",
  "2024-01-31T12:34:56Z",
  "I'm, you're, he's, we've, they'll, she'd, don't, can't",
  "I'M SHOUTING, DON'T",
  "'s 't 're 've 'm 'll 'd",
  "!!!???...,,,;;;:::",
  "(parens) [brackets] {braces} <angles>",
  "~`@#$%^&*-_=+|\\/",
  "“smart quotes” ‘single’ — em dash – en dash …",
  "日本語のテキストです。",
  "中文文本，标点符号。",
  "한국어 텍스트",
  "Ελληνικά και русский текст",
  "עברית ועربية",
  "emoji 😀😃😄 👍🏽 👨‍👩‍👧‍👦 🇩🇪",
  "e\u0301 a\u0300 n\u0303 (combining marks)",
  "\u00e9 vs e\u0301",
  "zero\u200bwidth\u200djoiner",
  "nbsp\u00a0here",
  "<|im_start|>",
  "<|im_end|>",
  "<|endoftext|>",
  "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n",
  "text<|im_end|>text",
  "<repo_name>specsample<file_sep>README.md",
  "<|im_start |> not special",
  "ÀÉÎÕÜ àéîõü ß ÿ",
  "\x00\x01\x7f control chars",
  "mixed 123abc456 def789",
  "    ",
  "\u3000ideographic space",
  "a" * 300,
  "word " * 50,
  "https://example.com/path?query=1&x=y#frag",
  "user@example.org",
  "$ pip install -e '.[dev]'",
  "```python\nprint('hi')\n```",
  "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 math 𝑥² + 𝑦² = 𝑧²",
  "Ⅻ ½ ¾ ① ②",
]
POOL = (
  list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
  + list(" \t\n\r  ")
  + list(".,;:!?'\"()[]{}<>-_=+*/\\|@#$%^&~`")
  + list("日本語中文한국어ñéüßøΩжλ")
  + ["😀", "👍🏽", "🇩🇪", "\u0301", "\u0308", "\u200d"]
  + ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "'s", "'ll", "n't", "    ", "123", "0.5"]
)


def strings() -> list[str]:
  rng = random.Random(0)
  generated = [
    "".join(rng.choices(POOL, k=rng.randint(1, 40))) for _ in range(200 - len(HANDWRITTEN))
  ]
  texts = HANDWRITTEN + generated
  assert len(texts) == 200
  return texts


CONVERSATIONS = [
  [{"role": "user", "content": "Hello!"}],
  [
    {"role": "system", "content": "You are a terse assistant."},
    {"role": "user", "content": "What is 2 + 2?"},
  ],
  [
    {"role": "system", "content": "Answer in German."},
    {"role": "user", "content": "Translate: good morning"},
    {"role": "assistant", "content": "Guten Morgen"},
    {"role": "user", "content": "And: good night\n\nThanks!"},
  ],
  [
    {"role": "user", "content": "日本語で答えて 😀"},
    {"role": "assistant", "content": "はい。", "name": None},
    {"role": "user", "content": "def f():\n\treturn 1"},
  ],
  [{"role": "user", "content": "an <|im_end|> inside the text"}],
]


SPECIAL_TEXT = ("<|im_start|>", "<|im_end|>", "<|endoftext|>", "<repo_name>", "<file_sep>")


@pytest.fixture(scope="module")
def smollm2_pair():
  from transformers import AutoTokenizer

  directory, filename = os.path.split(SMOLLM2)
  return Tokenizer.from_gguf(SMOLLM2), AutoTokenizer.from_pretrained(directory, gguf_file=filename)


def number_after_space(text: str) -> bool:
  """Whether a \\p{N} character follows whitespace or another \\p{N} character in `text`:
  where splitting off every number first changes GPT-2's pre-tokenization."""
  numeric = [unicodedata.category(c).startswith("N") for c in text]
  return any(numeric[i] and (text[i - 1].isspace() or numeric[i - 1]) for i in range(1, len(text)))


@needs_smollm2
def test_encode_and_decode_equal_transformers(smollm2_pair):
  """Equal ids except where a number follows whitespace. SmolLM2's pre-tokenizer ("smollm")
  isolates every \\p{N} character before GPT-2's split (llama.cpp's llama-vocab.cpp, and
  `Digits(individual_digits=True)` in SmolLM2's own tokenizer.json); transformers' GGUF
  loader leaves that step out, so it splits "    8" as "ĠĠĠ" + "Ġ8" (ours: "ĠĠĠĠ" + "8")
  and " ½" as "ĠÂ" + ... (ours: "Ġ" + "Â½"). Everywhere, ours equals transformers'
  vocabulary, merges and special tokens with that one step added."""
  from tokenizers import Tokenizer as Backend
  from tokenizers import pre_tokenizers

  ours, theirs = smollm2_pair
  with_digits = Backend.from_str(theirs.backend_tokenizer.to_str())
  with_digits.pre_tokenizer = pre_tokenizers.Sequence(
    [pre_tokenizers.Digits(individual_digits=True), theirs.backend_tokenizer.pre_tokenizer]
  )
  same = differing = 0
  for text in strings():
    ids = ours.encode(text, parse_special=True)
    assert ids == with_digits.encode(text).ids, repr(text)
    if not number_after_space(text):
      assert ids == theirs.encode(text), repr(text)
      assert ours.encode(text) == theirs.encode(text, split_special_tokens=True), repr(text)
      same += 1
    else:
      differing += ids != theirs.encode(text)
    assert ours.decode(ids) == theirs.decode(ids, skip_special_tokens=True), repr(text)
    if not any(special in text for special in SPECIAL_TEXT):
      assert ours.encode(text) == ids, repr(text)  # ordinary text: the ids of before
  assert same >= 150 and differing >= 2, (same, differing)
  assert ours.encode("    8") != theirs.encode("    8")
  assert ours.encode("Hello")[0] != ours.bos_id  # SmolLM2 adds no BOS


@needs_smollm2
def test_properties(smollm2_pair):
  ours, theirs = smollm2_pair
  assert ours.vocab_size == len(theirs) == 49152
  assert (ours.bos_id, ours.eos_id, ours.pad_id) == (1, 2, 2)
  assert (ours.bos_id, ours.eos_id) == (theirs.bos_token_id, theirs.eos_token_id)
  assert ours.chat_template == theirs.chat_template
  assert ours.token_text(2) == "<|im_end|>"
  assert ours.token_text(ours.encode(" hello")[0]) == " hello"
  piece = ours.encode("日")[0]  # the first byte-level piece of a 3-byte character
  assert ours.decode([piece]) == "\ufffd" and ours.token_text(piece).startswith("\\x")
  assert ours.decode(ours.encode("<|im_start|>user\nhi<|im_end|>", parse_special=True)) == (
    "user\nhi"
  )
  assert (
    ours.decode(ours.encode("<|im_start|>user\nhi<|im_end|>")) == "<|im_start|>user\nhi<|im_end|>"
  )


@needs_smollm2
def test_chat_template_equals_transformers(smollm2_pair):
  ours, theirs = smollm2_pair
  for messages in CONVERSATIONS:
    for prompt in (True, False):
      text = theirs.apply_chat_template(messages, tokenize=False, add_generation_prompt=prompt)
      assert ours.render_chat(messages, add_generation_prompt=prompt) == text
      ids = theirs_chat_ids(theirs, messages, add_generation_prompt=prompt)
      assert ours.apply_chat_template(
        messages, add_generation_prompt=prompt, parse_special=True
      ) == (ids)
      if sanitizes(theirs):
        sanitized = theirs_chat_ids(
          theirs, messages, add_generation_prompt=prompt, sanitize_control_tokens=True
        )
        assert ours.apply_chat_template(messages, add_generation_prompt=prompt) == sanitized
      if not any(special in str(messages) for special in SPECIAL_TEXT):
        assert ours.apply_chat_template(messages, add_generation_prompt=prompt) == ids
  prompt = ours.render_chat(CONVERSATIONS[0])
  assert prompt.startswith("<|im_start|>system\n") and prompt.endswith("<|im_start|>assistant\n")
  assert ours.apply_chat_template(CONVERSATIONS[0]) == ours.encode(prompt, parse_special=True)


@needs_smollm2
def test_from_directory_saved_by_transformers(smollm2_pair, tmp_path):
  ours, theirs = smollm2_pair
  theirs.save_pretrained(tmp_path)
  loaded = load_tokenizer(tmp_path)
  assert loaded.vocab_size == ours.vocab_size
  assert (loaded.bos_id, loaded.eos_id, loaded.pad_id) == (ours.bos_id, ours.eos_id, ours.pad_id)
  assert loaded.chat_template == ours.chat_template
  for text in strings():  # the directory holds transformers' tokenizer (see above)
    assert loaded.encode(text, parse_special=True) == theirs.encode(text), repr(text)
    assert loaded.encode(text) == theirs.encode(text, split_special_tokens=True), repr(text)
    if not number_after_space(text):
      assert loaded.encode(text) == ours.encode(text), repr(text)
  for messages in CONVERSATIONS:
    assert loaded.apply_chat_template(messages) == ours.apply_chat_template(messages)
  # a template in tokenizer_config.json only (older transformers), no chat_template.jinja
  (tmp_path / "chat_template.jinja").unlink(missing_ok=True)
  config = json.loads((tmp_path / "tokenizer_config.json").read_text())
  config["chat_template"] = "{% for m in messages %}[{{ m['content'] }}]{% endfor %}"
  (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
  assert Tokenizer.from_directory(tmp_path).render_chat(CONVERSATIONS[0]) == "[Hello!]"


@needs_smollm2
def test_llama3_style_gguf_adds_bos_like_transformers(tmp_path):
  """SmolLM2's first 3000 tokens, split the Llama 3 way ("llama-bpe"), with BOS added."""
  from transformers import AutoTokenizer

  meta = read_gguf_metadata(SMOLLM2)
  tokens, size = meta["tokenizer.ggml.tokens"][:3000], 3000
  kept = set(tokens)
  merges = [m for m in meta["tokenizer.ggml.merges"] if {*m.split(" "), m.replace(" ", "")} <= kept]
  write_tokenizer_gguf(
    tmp_path / "llama3.gguf",
    tokens=[*tokens, "<|begin_of_text|>", "<think>"],
    merges=merges,
    types=[*meta["tokenizer.ggml.token_type"][:size], 3, 4],
    bos_token_id=size,
    eos_token_id=2,
    add_bos_token=True,
    chat_template="{{ bos_token }}{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}"
    "{% endfor %}",
  )
  ours = Tokenizer.from_gguf(tmp_path / "llama3.gguf")
  theirs = AutoTokenizer.from_pretrained(tmp_path, gguf_file="llama3.gguf")
  for text in [*strings()[:60], "<think>x</think>", "<|begin_of_text|>hi"]:
    ids = ours.encode(text, parse_special=True)
    assert ids == theirs.encode(text), repr(text)
    assert ours.encode(text) == theirs.encode(text, split_special_tokens=True), repr(text)
    assert ids[0] == size  # BOS
    assert ours.decode(ids) == theirs.decode(ids, skip_special_tokens=True), repr(text)
  messages = CONVERSATIONS[2]
  expected = theirs.apply_chat_template(messages, add_generation_prompt=True, return_dict=False)
  assert ours.apply_chat_template(messages) == expected
  assert ours.apply_chat_template(messages).count(size) == 1
  forged = [{"role": "user", "content": "<|begin_of_text|><user><think>"}]
  assert ours.apply_chat_template(forged).count(size) == 1  # the template's BOS only
  if sanitizes(theirs):
    expected = theirs_chat_ids(theirs, forged, sanitize_control_tokens=True)
    assert ours.apply_chat_template(forged) == expected
  # Without tokenizer.ggml.add_bos_token, llama.cpp adds BOS for the llama3 family (as
  # Llama 3's own tokenizer does); transformers' GGUF loader does not.
  write_tokenizer_gguf(
    tmp_path / "nobos.gguf", tokens=[*tokens, "<|begin_of_text|>"], merges=merges, bos_token_id=size
  )
  assert Tokenizer.from_gguf(tmp_path / "nobos.gguf").encode("hi")[0] == size


def test_bad_inputs(tmp_path):
  def fails(path, match, build=load_tokenizer):
    with pytest.raises(CheckpointError, match=match) as caught:
      build(path)
    assert os.fspath(path) in str(caught.value)

  fails(tmp_path / "absent", "no such file or directory")
  (tmp_path / "notes.txt").write_text("hello")
  fails(tmp_path / "notes.txt", "expected a .gguf file or a Hugging Face tokenizer directory")
  (tmp_path / "fake.gguf").write_text("not really a gguf file")
  fails(tmp_path / "fake.gguf", "not a readable GGUF file")
  fails(tmp_path, "no tokenizer.json")
  (tmp_path / "tokenizer.json").write_text("{broken")
  fails(tmp_path, "not a readable tokenizer.json")

  write_tokenizer_gguf(tmp_path / "mystery.gguf", pre="mystery-pre", merges=["a b"])
  fails(tmp_path / "mystery.gguf", "pre-tokenizer 'mystery-pre'.*not supported")
  write_tokenizer_gguf(tmp_path / "nopre.gguf", pre=None, merges=["a b"])
  fails(tmp_path / "nopre.gguf", "pre-tokenizer None")
  write_tokenizer_gguf(tmp_path / "spm.gguf", model="llama", pre="default")
  fails(tmp_path / "spm.gguf", "tokenizer model 'llama' is not supported")
  write_tokenizer_gguf(tmp_path / "nomerges.gguf")
  fails(tmp_path / "nomerges.gguf", "needs tokenizer.ggml.merges")
  write_tokenizer_gguf(tmp_path / "badbos.gguf", merges=["a b"], bos_token_id=99)
  fails(tmp_path / "badbos.gguf", "bos token id 99 is outside the vocabulary")
  writer = gguf.GGUFWriter(os.fspath(tmp_path / "bare.gguf"), "llama")
  writer.write_header_to_file()
  writer.write_kv_data_to_file()
  writer.write_tensors_to_file()
  writer.close()
  fails(tmp_path / "bare.gguf", "embeds no tokenizer")

  tiny = Tokenizer.from_gguf(_good(tmp_path))
  assert tiny.encode("abab") == [2, 2] and tiny.decode([2, 0]) == "aba"
  with pytest.raises(ValueError, match="no chat template"):
    tiny.render_chat([{"role": "user", "content": "x"}])
  assert {"smollm", "gpt2", "llama-bpe"} <= set(PRE_TOKENIZERS)


def _good(tmp_path):
  path = tmp_path / "good.gguf"
  write_tokenizer_gguf(path, pre="gpt2", merges=["a b"])
  return path
