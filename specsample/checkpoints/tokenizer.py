"""Text <-> token ids for decoder-only models, from a GGUF file or a Hugging Face directory.

`Tokenizer` wraps a Rust `tokenizers.Tokenizer` (transformers is not needed at run time)
and encodes, decodes and renders chat templates the way transformers does for the same
model, except that text is never read as a control token unless asked: `encode(text)`
equals `AutoTokenizer...encode(text, split_special_tokens=True)` (BOS only where that
adds one; `parse_special=True`: `encode(text)`), `decode(ids)` equals `decode(ids,
skip_special_tokens=True)` (an id outside the vocabulary is a ValueError), and
`apply_chat_template(messages)` equals `apply_chat_template(messages,
add_generation_prompt=True, sanitize_control_tokens=True)` (`parse_special=True`: without
`sanitize_control_tokens`). For messages that spell no control token all of these ids are
the same.

`Tokenizer.from_gguf` rebuilds the byte-level BPE tokenizer ("gpt2" in llama.cpp's terms)
that a GGUF file embeds in its metadata, pre-tokenizing as llama.cpp does for the file's
`tokenizer.ggml.pre` (`PRE_TOKENIZERS`), which is what the model's original tokenizer
does. transformers' own GGUF loader differs in three places: for "smollm" (and the
StarCoder family) it does not split off each number character first (SmolLM2's
`tokenizer.json` has `Digits(individual_digits=True)`), so "    8" or " ½" tokenize
differently; for the llama3 family it neither adds BOS when the file has no
`tokenizer.ggml.add_bos_token` nor applies Llama 3's `ignore_merges`. SentencePiece
("llama") GGUF tokenizers are not supported. `Tokenizer.from_directory` reads
`tokenizer.json`, `tokenizer_config.json` and `chat_template.jinja`.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping, Sequence
from typing import Any

from specsample.checkpoints import chat_template
from specsample.checkpoints.errors import CheckpointError

# llama.cpp's pre-tokenizer splits (llama-vocab.cpp), by the name `tokenizer.ggml.pre` gives.
_GPT2_SPLIT = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
_LLAMA3_SPLIT = (
  r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
  r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2_SPLIT = (
  r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
  r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_LLAMA3_FAMILY = ("llama-bpe", "llama3", "llama-v3", "falcon3", "falcon-h1", "pixtral", "lfm2")
# name -> (split off each \\p{N} character first, the split regex, llama3 family: BOS by
# default and whole-word vocabulary hits before merges, like Llama 3's `ignore_merges`).
PRE_TOKENIZERS = {
  **dict.fromkeys(("gpt2", "mpt", "olmo", "jais"), (False, _GPT2_SPLIT, False)),
  **dict.fromkeys(
    ("smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva"),
    (True, _GPT2_SPLIT, False),
  ),
  **dict.fromkeys(_LLAMA3_FAMILY, (False, _LLAMA3_SPLIT, True)),
  **dict.fromkeys(("dbrx", "smaug-bpe"), (False, _LLAMA3_SPLIT, False)),
  **dict.fromkeys(("qwen2", "deepseek-r1-qwen", "stablelm2"), (False, _QWEN2_SPLIT, False)),
}
_CONTROL, _USER_DEFINED = 3, 4  # llama.cpp token types
_SPECIAL_NAMES = ("bos_token", "eos_token", "unk_token", "pad_token")


@functools.cache
def byte_alphabet() -> dict[int, str]:
  """GPT-2's byte -> printable character map (byte-level BPE spells tokens in it)."""
  printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
  chars, extra = {}, 0
  for byte in range(256):
    if byte in printable:
      chars[byte] = chr(byte)
    else:
      chars[byte] = chr(256 + extra)
      extra += 1
  return chars


class Tokenizer:
  """A `tokenizers.Tokenizer` plus what transformers keeps beside it (special tokens, BOS
  policy, chat template). Build one with `from_gguf`, `from_directory` or `load_tokenizer`."""

  def __init__(
    self,
    backend,
    *,
    special_tokens: dict[str, str | None],
    add_bos: bool | None = None,
    add_eos: bool = False,
    chat_template: str | None = None,
    source: str = "",
  ):
    """backend: a `tokenizers.Tokenizer`. special_tokens: bos/eos/unk/pad_token -> text.
    add_bos: prepend BOS in `encode` (and add_eos: append EOS); None leaves both to the
    backend's post-processor, as a `tokenizer.json` with one defines."""
    self.backend = backend
    self.special_tokens = {k: v for k, v in special_tokens.items() if v is not None}
    self.add_bos, self.add_eos = add_bos, add_eos
    self._chat_template = chat_template
    self.source = source

  # --- ids -------------------------------------------------------------------------------

  def _id(self, name: str) -> int | None:
    token = self.special_tokens.get(name)
    return None if token is None else self.backend.token_to_id(token)

  @property
  def vocab_size(self) -> int:
    return self.backend.get_vocab_size(with_added_tokens=True)

  @property
  def bos_id(self) -> int | None:
    return self._id("bos_token")

  @property
  def eos_id(self) -> int | None:
    return self._id("eos_token")

  @property
  def pad_id(self) -> int | None:
    return self._id("pad_token")

  @property
  def chat_template(self) -> str | None:
    return self._chat_template

  @functools.cached_property
  def _text_backend(self):
    """The backend that reads special-token text as plain text (tokenizers'
    `encode_special_tokens`), a copy so that `backend` itself never changes."""
    from tokenizers import Tokenizer as Backend

    copy = Backend.from_str(self.backend.to_str())
    copy.encode_special_tokens = True
    return copy

  def encode(self, text: str, *, parse_special: bool = False) -> list[int]:
    """Token ids of `text`, with BOS/EOS exactly when transformers adds them by default.

    Text that spells a special token ("<|im_end|>") is encoded as the characters it is
    made of, as transformers' `encode(text, split_special_tokens=True)` does: text from a
    user never becomes a control token. `parse_special=True` reads such text as the
    special token (transformers' default `encode(text)`).
    """
    backend = self.backend if parse_special else self._text_backend
    if self.add_bos is None:
      return backend.encode(text, add_special_tokens=True).ids
    ids = backend.encode(text, add_special_tokens=False).ids
    if self.add_bos and self.bos_id is not None:
      ids = [self.bos_id, *ids]
    if self.add_eos and self.eos_id is not None:
      ids = [*ids, self.eos_id]
    return ids

  def decode(self, ids: Sequence[int]) -> str:
    """Text of `ids`, special tokens skipped (bytes that are no full character -> U+FFFD).
    An id outside 0..vocab_size - 1 raises a ValueError naming it."""
    return self.backend.decode(self._checked(ids), skip_special_tokens=True)

  def _checked(self, ids: Sequence[int]) -> list[int]:
    """`ids` as Python ints, each checked to lie in the vocabulary."""
    ids, size = [int(i) for i in ids], self.vocab_size
    for i in ids:
      if not 0 <= i < size:
        raise ValueError(
          f"token id {i} is outside the vocabulary (ids 0..{size - 1}, {size} tokens)"
        )
    return ids

  def token_text(self, token_id: int) -> str:
    """The readable text of one token, for per-token traces: special tokens as themselves,
    a byte-level piece of a multi-byte character as escapes (e.g. "\\xe6\\x97")."""
    (token_id,) = self._checked([token_id])
    text = self.backend.decode([token_id], skip_special_tokens=False)
    piece = self.backend.id_to_token(token_id)
    if "\ufffd" in text and piece is not None:
      to_byte = {char: byte for byte, char in byte_alphabet().items()}
      if all(char in to_byte for char in piece):
        return bytes(to_byte[char] for char in piece).decode("utf-8", errors="backslashreplace")
    return text

  # --- chat ------------------------------------------------------------------------------

  def render_chat(self, messages: list[dict], add_generation_prompt: bool = True) -> str:
    """The chat template applied to `messages` (dicts with "role" and "content"), as text;
    equals transformers' `apply_chat_template(messages, tokenize=False, ...)`."""
    return self._render(self._chat(messages), add_generation_prompt)

  def _chat(self, messages: list[dict]) -> list[dict]:
    """The messages checked, without their None values (as transformers drops them)."""
    if self._chat_template is None:
      raise ValueError(f"{self.source}: this tokenizer has no chat template")
    if not messages:
      raise ValueError("cannot apply a chat template to an empty conversation")
    chat = []
    for message in messages:
      if not isinstance(message, dict):
        raise TypeError(f"chat messages must be dicts, got {message!r}")
      chat.append({key: value for key, value in message.items() if value is not None})
    return chat

  def _render(self, chat: list[dict], add_generation_prompt: bool) -> str:
    return chat_template.compile_template(self._chat_template).render(
      messages=chat,
      tools=None,
      documents=None,
      add_generation_prompt=add_generation_prompt,
      **self.special_tokens,
    )

  def apply_chat_template(
    self, messages: list[dict], *, add_generation_prompt: bool = True, parse_special: bool = False
  ) -> list[int]:
    """Token ids of `render_chat(messages)`; no BOS/EOS added beyond the template's own.

    The template's own control tokens become tokens; the same text inside the messages
    stays text (`chat_template.mark_control_tokens`), so a message cannot end its turn
    or forge another's. This equals transformers' `apply_chat_template(messages,
    sanitize_control_tokens=True)`; messages without control-token text get the ids
    of the rendered text encoded whole. `parse_special=True` encodes the rendered text
    whole, control tokens in the messages included (transformers' default).
    """
    chat = self._chat(messages)
    if parse_special:
      text = self._render(chat, add_generation_prompt)
      return self.backend.encode(text, add_special_tokens=False).ids
    added = self.backend.get_added_tokens_decoder().values()
    controls = chat_template.control_tokens(added, self._chat_template)
    text = self._render(chat_template.mark_control_tokens(chat, controls), add_generation_prompt)
    pieces = chat_template.split_marked_chat(text, tuple(token.content for token in added))
    ids = self.backend.encode(pieces[0][0], add_special_tokens=False).ids
    for piece, as_text in pieces[1:]:
      piece_ids = self._encode_chat_piece(piece, as_text)
      if as_text and self.backend.token_to_id(piece) in piece_ids:
        raise ValueError(f"cannot keep {piece!r} as text: this tokenizer makes it from plain text")
      ids += piece_ids
    return ids

  def _encode_chat_piece(self, piece: str, as_text: bool) -> list[int]:
    """Ids of a piece from the middle of a chat; with `as_text`, no added token is matched
    (transformers' `_encode_without_added_tokens`). Encoded after a newline that is then
    removed (as transformers does), so that a tokenizer adding a prefix space at the
    start of a text does not add one here."""

    def encode(text: str) -> list[int]:
      if not as_text:
        return self.backend.encode(text, add_special_tokens=False).ids
      backend = self.backend
      if backend.normalizer is not None:
        text = backend.normalizer.normalize_str(text)
      splits = [text]
      if backend.pre_tokenizer is not None:
        splits = [split for split, _ in backend.pre_tokenizer.pre_tokenize_str(text)]
      return [token.id for split in splits for token in backend.model.tokenize(split)]

    newline = self.backend.encode("\n", add_special_tokens=False).ids
    ids = encode("\n" + piece)
    return ids[len(newline) :] if ids[: len(newline)] == newline else encode(piece)

  # --- constructors ----------------------------------------------------------------------

  @classmethod
  def from_gguf(cls, path: str | os.PathLike) -> Tokenizer:
    """The byte-level BPE tokenizer a GGUF file embeds (`tokenizer.ggml.*` metadata)."""
    from tokenizers import AddedToken, Regex, decoders, models, pre_tokenizers
    from tokenizers import Tokenizer as Backend

    from specsample.checkpoints.formats.gguf import read_gguf_metadata

    path = os.fspath(path)
    meta = read_gguf_metadata(path)
    kind = meta.get("tokenizer.ggml.model")
    if kind is None or "tokenizer.ggml.tokens" not in meta:
      raise CheckpointError(f"{path}: the GGUF file embeds no tokenizer (tokenizer.ggml.*)")
    if kind != "gpt2":
      raise CheckpointError(
        f"{path}: GGUF tokenizer model {kind!r} is not supported; only byte-level BPE "
        "('gpt2') is (SentencePiece 'llama' tokenizers: use the model's HF directory)"
      )
    pre = meta.get("tokenizer.ggml.pre")
    if pre not in PRE_TOKENIZERS:
      raise CheckpointError(
        f"{path}: GGUF pre-tokenizer {pre!r} (tokenizer.ggml.pre) is not supported; "
        f"supported: {', '.join(sorted(PRE_TOKENIZERS))}"
      )
    tokens = meta["tokenizer.ggml.tokens"]
    types = meta.get("tokenizer.ggml.token_type") or [1] * len(tokens)
    merges = meta.get("tokenizer.ggml.merges")
    if merges is None or len(types) != len(tokens):
      raise CheckpointError(
        f"{path}: a byte-level BPE tokenizer needs tokenizer.ggml.merges and one token type "
        f"per token ({len(tokens)} tokens, {len(types)} types)"
      )
    alphabet = byte_alphabet()
    spelled = set(alphabet.values())

    def spell(token: str) -> str:  # as transformers does: tokens outside the byte alphabet
      if set(token) <= spelled:
        return token
      return "".join(alphabet[byte] for byte in token.encode("utf-8"))

    vocab = {spell(token): index for index, token in enumerate(tokens)}
    digits, split, llama3 = PRE_TOKENIZERS[pre]
    try:
      pairs = [tuple(merge.split(" ", 1)) for merge in merges]
      bpe = models.BPE(vocab=vocab, merges=pairs, fuse_unk=False, ignore_merges=llama3)
      backend = Backend(bpe)
    except Exception as error:  # noqa: BLE001 - the Rust side raises its own exception type
      raise CheckpointError(f"{path}: inconsistent BPE vocabulary/merges ({error})") from error
    steps = [pre_tokenizers.Digits(individual_digits=True)] if digits else []
    steps += [
      pre_tokenizers.Split(Regex(split), behavior="isolated"),
      pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ]
    backend.pre_tokenizer = pre_tokenizers.Sequence(steps)
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens(
      [
        AddedToken(token, normalized=False, special=True)
        for token, token_type in zip(tokens, types, strict=True)
        if token_type == _CONTROL and set(token) <= spelled
      ]
    )
    backend.add_tokens(
      [
        AddedToken(token, normalized=False, special=False)
        for token, token_type in zip(tokens, types, strict=True)
        if token_type == _USER_DEFINED and token in vocab
      ]
    )
    keys = dict(zip(_SPECIAL_NAMES, ("bos", "eos", "unknown", "padding"), strict=True))
    return cls.over_gguf_backend(backend, meta, tokens, keys, path, add_bos=llama3)

  @classmethod
  def over_gguf_backend(
    cls, backend, meta: Mapping[str, Any], tokens: Sequence[str], keys: Mapping[str, str],
    path, *, add_bos: bool,
  ) -> Tokenizer:  # fmt: skip
    """A tokenizer over `backend` with a GGUF file's settings: its special tokens (name ->
    the stem of the `tokenizer.ggml.<stem>_token_id` key, e.g. "bos_token" -> "bos"), its
    bos/eos switches (`add_bos` where the file says nothing) and its chat template."""
    special = {}
    for name, key in keys.items():
      index = meta.get(f"tokenizer.ggml.{key}_token_id")
      if index is not None and not 0 <= index < len(tokens):
        raise CheckpointError(f"{path}: {key} token id {index} is outside the vocabulary")
      special[name] = None if index is None else tokens[index]
    return cls(
      backend,
      special_tokens=special,
      add_bos=bool(meta.get("tokenizer.ggml.add_bos_token", add_bos)),
      add_eos=bool(meta.get("tokenizer.ggml.add_eos_token", False)),
      chat_template=meta.get("tokenizer.chat_template"),
      source=path,
    )

  @classmethod
  def from_directory(cls, path: str | os.PathLike) -> Tokenizer:
    """A Hugging Face directory: `tokenizer.json`, and `tokenizer_config.json` (special
    tokens, `chat_template`) and `chat_template.jinja` where present. BOS/EOS come from
    the `tokenizer.json` post-processor, as in transformers 5 (which ignores
    `add_bos_token` next to a `tokenizer.json`); none when it has no post-processor."""
    from tokenizers import Tokenizer as Backend

    path = os.fspath(path)
    tokenizer_file = os.path.join(path, "tokenizer.json")
    if not os.path.isfile(tokenizer_file):
      raise CheckpointError(f"{path}: no tokenizer.json (expected a Hugging Face tokenizer)")
    try:
      backend = Backend.from_file(tokenizer_file)
    except Exception as error:  # noqa: BLE001 - the Rust side raises its own exception type
      raise CheckpointError(f"{tokenizer_file}: not a readable tokenizer.json ({error})") from error
    config = _read_json(os.path.join(path, "tokenizer_config.json"))
    special_map = _read_json(os.path.join(path, "special_tokens_map.json"))
    special = {}
    for name in _SPECIAL_NAMES:
      token = config.get(name, special_map.get(name))
      special[name] = token.get("content") if isinstance(token, dict) else token
    template = config.get("chat_template")
    if isinstance(template, list):  # [{"name": ..., "template": ...}, ...]
      template = {entry.get("name"): entry.get("template") for entry in template}.get("default")
    jinja_file = os.path.join(path, "chat_template.jinja")
    if os.path.isfile(jinja_file):
      with open(jinja_file, encoding="utf-8") as f:
        template = f.read()
    manual = backend.post_processor is None
    return cls(
      backend,
      special_tokens=special,
      add_bos=False if manual else None,
      chat_template=template,
      source=path,
    )


def _read_json(path: str) -> dict:
  """A JSON object file, or {} when there is none."""
  from specsample.checkpoints.formats.safetensors import read_hf_json

  return read_hf_json(path) if os.path.isfile(path) else {}


def load_tokenizer(path: str | os.PathLike) -> Tokenizer:
  """A GGUF file (`.gguf`, or any file starting with the GGUF magic) or a HF directory."""
  path = os.fspath(path)
  if os.path.isdir(path):
    return Tokenizer.from_directory(path)
  if os.path.isfile(path):
    with open(path, "rb") as f:
      magic = f.read(4)
    if path.endswith(".gguf") or magic == b"GGUF":
      return Tokenizer.from_gguf(path)
    raise CheckpointError(f"{path}: expected a .gguf file or a Hugging Face tokenizer directory")
  raise CheckpointError(f"{path}: no such file or directory (expected a .gguf file or a directory)")
