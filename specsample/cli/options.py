"""Options the commands share, their parsers, and the checks made before any work starts
(values, inputs, decoding settings): a bad argument costs a one-line message, never a
finished run."""

from __future__ import annotations

import argparse
import pathlib
from typing import TYPE_CHECKING

from specsample.core import SamplingConfig
from specsample.decoding.adaptive import AdaptiveDraft
from specsample.decoding.drafters.dynamic_tree import DynamicTree
from specsample.decoding.drafters.tree import MAX_CHAINS
from specsample.decoding.inputs import SEED_RANGE
from specsample.decoding.settings import MAX_GAMMA
from specsample.decoding.shapes import DraftShape

if TYPE_CHECKING:
  from specsample.pairs import PairSpec


class UsageError(ValueError):
  """A bad combination of arguments (exit code 2, one line)."""


def bounded_number(text: str, parse, low, high, *, expected: str, out_of_range: str):
  """`text` read by `parse` (int or float), within [low, high]; else an
  ArgumentTypeError: "`expected`, got 'text'" or "`out_of_range`, got value"."""
  try:
    value = parse(text)
  except ValueError:
    raise argparse.ArgumentTypeError(f"{expected}, got {text!r}") from None
  if not low <= value <= high:
    raise argparse.ArgumentTypeError(f"{out_of_range}, got {value}")
  return value


def gamma_value(text: str) -> int | str:
  if text == "auto":
    return text
  return bounded_number(text, int, 1, MAX_GAMMA, expected='expected a positive integer or "auto"',
                        out_of_range=f"gamma must be in 1..{MAX_GAMMA}")  # fmt: skip


def unit_interval(text: str) -> float:
  within = "expected a number in [0, 1]"
  return bounded_number(text, float, 0.0, 1.0, expected=within, out_of_range=within)


def tree_shape(text: str) -> int | DynamicTree:
  """--tree K (K chains), "dynamic" or "dynamic:N" (a dynamic tree of N nodes): the tree
  shapes of `DraftShape.parse`, K spelled alone."""
  name = f"tree{text}" if text.strip().isdigit() else text
  expected = f"--tree takes a number of chains (2..{MAX_CHAINS}), 'dynamic' or 'dynamic:N'"
  try:
    shape = DraftShape.parse(name)
  except ValueError as error:
    if name == text and not text.startswith("dynamic"):  # neither a count nor a dynamic tree
      raise argparse.ArgumentTypeError(f"{expected}, got {text!r}") from None
    raise argparse.ArgumentTypeError(f"--tree: {error}") from None
  if not shape.is_tree:
    raise argparse.ArgumentTypeError(f"{expected}, got {text!r}")
  return shape.tree


def draft_shape_name(text: str) -> str:
  """A bench sweep's draft shape (decoding.shapes), by its canonical name."""
  try:
    return DraftShape.parse(text).name
  except ValueError as error:
    raise argparse.ArgumentTypeError(str(error)) from None


def seed_value(text: str) -> int:
  return bounded_number(text, int, SEED_RANGE[0], SEED_RANGE[1] - 1,
                        expected="expected an integer seed",
                        out_of_range="seed must be in [-2**63, 2**63)")  # fmt: skip


def positive_int(text: str) -> int:
  positive = "expected a positive integer"
  return bounded_number(text, int, 1, float("inf"), expected=positive, out_of_range=positive)


def int_list(text: str, maximum: int = 4096) -> tuple[int, ...]:
  """ "1-10" or "2,4,8" -> a tuple of ints, each in 1..maximum."""
  values: list[int] = []
  try:
    for part in text.split(","):
      low, _, high = part.partition("-")
      bounds = (int(low), int(high) if high else int(low))
      if min(bounds) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
      if max(bounds) > maximum:
        raise argparse.ArgumentTypeError(f"expected values up to {maximum}, got {max(bounds)}")
      values += range(bounds[0], bounds[1] + 1)
  except ValueError:
    raise argparse.ArgumentTypeError(f'expected e.g. "1-10" or "2,4,8", got {text!r}') from None
  if not values:
    raise argparse.ArgumentTypeError(f'expected e.g. "1-10" or "2,4,8", got {text!r}')
  return tuple(values)


def gamma_list(text: str) -> tuple[int, ...]:
  """ "1-10" or "2,4,8" -> gammas, each in 1..MAX_GAMMA."""
  try:
    return int_list(text, maximum=MAX_GAMMA)
  except argparse.ArgumentTypeError as error:
    if "up to" not in str(error):
      raise
    raise argparse.ArgumentTypeError(f"gamma must be in 1..{MAX_GAMMA}, got {text!r}") from None


def _sampling_number(text: str, name: str, parse) -> float | int:
  """`text` parsed, and accepted by SamplingConfig as `name` (the library's own rule)."""
  try:
    value = parse(text)
  except ValueError:
    kind = "an integer" if parse is int else "a number"
    raise argparse.ArgumentTypeError(f"expected {kind}, got {text!r}") from None
  try:
    SamplingConfig(**{name: value})
  except (ValueError, TypeError) as error:
    raise argparse.ArgumentTypeError(str(error)) from None
  return value


def temperature_value(text: str) -> float:
  """A finite temperature >= 0 (0: greedy)."""
  return _sampling_number(text, "temperature", float)


def top_k_value(text: str) -> int:
  """An integer >= 0 (0: off)."""
  return _sampling_number(text, "top_k", int)


def top_p_value(text: str) -> float:
  """A number in (0, 1] (1: off)."""
  return _sampling_number(text, "top_p", float)


def add_special_option(parser: argparse.ArgumentParser) -> None:
  """--special: read special-token text in the inputs as special tokens."""
  parser.add_argument(
    "--special",
    action="store_true",
    help='read text that spells a special token (e.g. "<|im_end|>") in the inputs and the '
    "system message as that token (default: as plain text, so that an input cannot end "
    "its turn in the chat template or forge another)",
  )


def add_decoding_options(parser: argparse.ArgumentParser, max_new_tokens: int) -> None:
  group = parser.add_argument_group("decoding")
  group.add_argument(
    "--gamma",
    type=gamma_value,
    default=None,
    help=f'draft tokens per iteration (1..{MAX_GAMMA}), or "auto": alpha from a probe of a few '
    "of the prompts, c and r measured on this machine (kept for the next runs), the best "
    "gamma, or plain decoding where none is predicted to pay (default: auto for generate's "
    "decoder-only pairs and for batches; else the pair's recommended gamma)",
  )
  group.add_argument(
    "--recalibrate",
    action="store_true",
    help="with gamma auto: measure this machine's step costs for the pair again (they are "
    "kept in the user's cache directory, $SPECSAMPLE_CACHE_DIR or ~/.cache/specsample)",
  )
  group.add_argument("--temperature", type=temperature_value, default=0.0, help="0 = greedy")
  group.add_argument("--top-k", type=top_k_value, default=0, help="0 = off")
  group.add_argument("--top-p", type=top_p_value, default=1.0, help="1 = off")
  group.add_argument("--verification", choices=["token", "block"], default="token")
  group.add_argument(
    "--adaptive",
    nargs="?",
    type=unit_interval,
    const=AdaptiveDraft.threshold,
    metavar="THRESHOLD",
    help="adaptive draft length: each row drafts up to gamma tokens and stops after one "
    "the draft is less sure of than its threshold, which its acceptance steers "
    f"(starting threshold, default {AdaptiveDraft.threshold})",
  )
  group.add_argument(
    "--tree",
    type=tree_shape,
    default=None,
    metavar="K|dynamic[:N]",
    help=f"draft K chains of gamma tokens (2..{MAX_CHAINS}), or a dynamic tree of the draft's "
    f"N most likely nodes, gamma deep (default N {DynamicTree.nodes}), and verify them in one "
    "tree-shaped target call (token verification; models with tree calls: T5, decoder-only)",
  )
  group.add_argument("--max-new-tokens", type=positive_int, default=max_new_tokens)
  group.add_argument("--seed", type=seed_value, default=0)
  group.add_argument("--repeats", type=positive_int, default=3, help="timed runs (median)")
  group.add_argument("--no-baseline", action="store_true", help="skip the autoregressive run")
  group.add_argument(
    "--no-stream",
    dest="stream",
    action="store_false",
    help="print the text when decoding ends (default: with one input and stdout a terminal, "
    "the text is printed as it is accepted, and the timed runs are of that streaming program)",
  )
  group.add_argument(
    "--trace",
    nargs="?",
    const="specsample_trace.html",
    metavar="HTML",
    help="draw the acceptance trace in the terminal and write it as HTML "
    "(default file: specsample_trace.html)",
  )
  group.add_argument(
    "--overwrite", action="store_true", help="replace an existing trace file or report"
  )


def pair_spec(args, *, trees: bool, dynamic_tree: bool, sharded: bool = False) -> PairSpec:
  """The pair the flags of `generate` and `bench` name (--target, --draft, --tokenizer,
  --dtype, --weights, --activations, --prompt-lookup), for the draft shapes the run uses."""
  from specsample.pairs import PairSpec  # the checkpoint readers load when a pair does

  return PairSpec(
    target=args.target, draft=args.draft, tokenizer=args.tokenizer, dtype=args.dtype,
    weights=args.weights, activations=args.activations, prompt_lookup=args.prompt_lookup,
    trees=trees, dynamic_tree=dynamic_tree, sharded=sharded,
  )  # fmt: skip


def read_inputs(texts: list[str], input_file: str | None) -> list[str]:
  """The inputs: positional texts or the non-empty lines of --input-file (not both)."""
  if input_file:
    if texts:
      raise UsageError("give inputs as arguments or with --input-file, not both")
    path = pathlib.Path(input_file)
    if path.is_dir():
      raise UsageError(f"--input-file {input_file} is a directory, not a file")
    if not path.exists():
      raise UsageError(f"--input-file {input_file}: no such file")
    try:
      lines = path.read_text(encoding="utf-8-sig").splitlines()  # a byte-order mark goes
    except UnicodeDecodeError as error:
      line = error.object[: error.start].count(b"\n") + 1
      raise UsageError(
        f"--input-file {input_file} is not UTF-8 text: line {line} has the byte "
        f"0x{error.object[error.start]:02x} ({error.reason})"
      ) from None
    texts = [line for line in lines if line.strip()]
    if not texts:
      raise UsageError(f"--input-file {input_file} has no non-empty lines")
    return texts
  if not texts:
    raise UsageError("give inputs as arguments or with --input-file")
  for number, text in enumerate(texts, start=1):
    if not text.strip():
      raise UsageError(f"input {number} is empty: give some text to decode")
    check_text(text, f"input {number}")
  return texts


def check_text(text: str, what: str) -> None:
  """Refuses text that is not Unicode text: a lone surrogate (an argument's bytes that were
  not UTF-8 arrive as U+DC80..U+DCFF), named with its position."""
  for index, character in enumerate(text):
    if "\ud800" <= character <= "\udfff":
      if "\udc80" <= character <= "\udcff":
        problem = f"the byte 0x{ord(character) - 0xDC00:02x}, which is not UTF-8"
      else:
        problem = f"a lone surrogate U+{ord(character):04X}"
      before = text[max(0, index - 20) : index]
      raise UsageError(
        f"{what} has {problem} at character {index + 1} (after {before!r}): give UTF-8 text"
      )


def check_weights_option(weights: str, dtype: str) -> None:
  """--weights other than float32 keeps the arithmetic in float32: refused with another
  --dtype (checked before anything is loaded; --weights auto then means float32)."""
  if weights not in ("auto", "float32") and dtype != "float32":
    raise UsageError(f"--weights {weights} keeps the arithmetic in float32: drop --dtype {dtype}")
