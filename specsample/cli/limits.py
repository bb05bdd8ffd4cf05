"""How many tokens a model takes, and the checks of `--max-new-tokens` and the encoded
prompts against it, made before anything is compiled (a prompt past the context
otherwise asks XLA for tens of gigabytes and dies out of memory).

The context is read off the target checkpoint's config, before its weights load:

  - a GGUF file: `<architecture>.context_length` (SmolLM2-135M-Instruct: 8192);
  - a Hugging Face decoder-only directory: `max_position_embeddings` in config.json;
  - a T5 (relative position buckets, no position table that ends): 512 tokens for the
    input and 512 for the output, the lengths T5 was pre-trained and fine-tuned with
    (Raffel et al. 2020; `specsample.data.specs`), or `n_positions` of a Hugging Face
    config.json that has it;
  - a config that names no context (e.g. a directory saved without the key): no check.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Sequence

from specsample.cli.options import UsageError

T5_CONTEXT = 512  # tokens of input, and of output, T5 was trained with


@dataclasses.dataclass(frozen=True)
class Context:
  """A model's context: `tokens` positions, read from `source` (for the messages)."""

  tokens: int
  source: str  # e.g. "llama.context_length in its GGUF file"
  encoder_decoder: bool  # T5: the prompt goes to the encoder; prompt and output each get
  # `tokens`. Decoder-only: prompt and output share them.


def context_of(path: str | os.PathLike | None) -> Context | None:
  """The context of the checkpoint at `path` (a GGUF file, a Hugging Face directory or
  hub id, a T5X checkpoint), or None where it is unknown or the path cannot be read (the
  loader then says why)."""
  if path is None:
    return None
  from specsample.checkpoints.loader import is_gguf, is_hf_directory, local_path

  try:
    local = local_path(path)
    if is_gguf(local):
      from specsample.checkpoints.formats.gguf import read_gguf_metadata

      metadata = read_gguf_metadata(local)
      key = f"{metadata.get('general.architecture')}.context_length"
      tokens = metadata.get(key)
      return None if tokens is None else Context(int(tokens), f"{key} in its GGUF file", False)
    if is_hf_directory(local):
      with open(os.path.join(local, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
      if config.get("is_encoder_decoder") or config.get("model_type") in ("t5", "mt5", "umt5"):
        if config.get("n_positions"):
          return Context(int(config["n_positions"]), "n_positions in its config.json", True)
        return _t5_context()
      tokens = config.get("max_position_embeddings")
      source = "max_position_embeddings in its config.json"
      return None if tokens is None else Context(int(tokens), source, False)
  except Exception:  # an unreadable checkpoint: the loader reports it in its own words
    return None
  return _t5_context()  # a T5X checkpoint


def _t5_context() -> Context:
  return Context(T5_CONTEXT, "T5's training length; its positions are relative", True)


def target_context(target: str | os.PathLike | None, max_new_tokens: int) -> Context | None:
  """The context of the target checkpoint (None: the bundled SmolLM2-135M-Instruct, as
  `pairs.load_pair` picks it; "bundled:NAME": a bundled T5 pair's target), after
  checking `max_new_tokens` against it."""
  if target is None:
    from specsample.bundled import smollm2_target_path

    target = smollm2_target_path()
  elif str(target).startswith("bundled:"):  # a bundled T5 pair (pairs.load_pair checks it)
    from specsample.bundled import PAIRS, pair_dir

    name = str(target).partition(":")[2]
    target = pair_dir(name) / "target" if name in PAIRS else None
  context = context_of(target)
  check_max_new_tokens(max_new_tokens, context)
  return context


def check_max_new_tokens(max_new_tokens: int, context: Context | None) -> None:
  """Before loading: `max_new_tokens` fits the context (with a one-token prompt for a
  decoder-only model)."""
  if context is None:
    return
  room = context.tokens if context.encoder_decoder else context.tokens - 1
  if max_new_tokens > room:
    raise UsageError(
      f"--max-new-tokens {max_new_tokens} is past the target's context of {context.tokens} "
      f"tokens ({context.source}): at most {room}"
    )


def check_prompt_lengths(
  prompts: Sequence[Sequence[int]], max_new_tokens: int, context: Context | None
) -> None:
  """Before compiling: every encoded prompt, with `max_new_tokens` after it for a
  decoder-only model, fits the context; the message names the longest prompt's input."""
  if context is None or not prompts:
    return
  lengths = [len(prompt) for prompt in prompts]
  longest = max(range(len(lengths)), key=lengths.__getitem__)
  length = lengths[longest]
  which = f"input {longest + 1}" if len(prompts) > 1 else "the input"
  if context.encoder_decoder:
    if length > context.tokens:
      raise UsageError(
        f"{which} is {length} tokens long, past the target's context of {context.tokens} "
        f"input tokens ({context.source}): shorten it"
      )
    return
  if length + max_new_tokens > context.tokens:
    raise UsageError(
      f"{which} is {length} tokens long and --max-new-tokens is {max_new_tokens}: "
      f"{length + max_new_tokens} tokens, past the target's context of {context.tokens} "
      f"({context.source}); shorten the input or lower --max-new-tokens"
    )
