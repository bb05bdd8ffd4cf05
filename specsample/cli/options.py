"""Options the commands share, their parsers, and the checks made before any work starts
(inputs, output paths, tokenizer against model): a bad argument costs a one-line message,
never a finished run."""

from __future__ import annotations

import argparse
import os
import pathlib
import sys

from specsample.cli.compare import DecodeSettings
from specsample.core import SamplingConfig
from specsample.decoding.adaptive import AdaptiveDraft
from specsample.decoding.drafters.tree import MAX_CHAINS
from specsample.decoding.inputs import SEED_RANGE
from specsample.decoding.settings import MAX_GAMMA


class UsageError(ValueError):
  """A bad combination of arguments (exit code 2, one line)."""


def gamma_value(text: str) -> int | str:
  if text == "auto":
    return text
  try:
    value = int(text)
  except ValueError:
    raise argparse.ArgumentTypeError(
      f'expected a positive integer or "auto", got {text!r}'
    ) from None
  if not 1 <= value <= MAX_GAMMA:
    raise argparse.ArgumentTypeError(f"gamma must be in 1..{MAX_GAMMA}, got {value}")
  return value


def unit_interval(text: str) -> float:
  try:
    value = float(text)
  except ValueError:
    raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {text!r}") from None
  if not 0.0 <= value <= 1.0:
    raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {value}")
  return value


def chain_count(text: str) -> int:
  value = positive_int(text)
  if not 2 <= value <= MAX_CHAINS:
    raise argparse.ArgumentTypeError(f"--tree takes 2..{MAX_CHAINS} chains, got {value}")
  return value


def seed_value(text: str) -> int:
  try:
    value = int(text)
  except ValueError:
    raise argparse.ArgumentTypeError(f"expected an integer seed, got {text!r}") from None
  if not SEED_RANGE[0] <= value < SEED_RANGE[1]:
    raise argparse.ArgumentTypeError(f"seed must be in [-2**63, 2**63), got {text}")
  return value


def positive_int(text: str) -> int:
  try:
    value = int(text)
  except ValueError:
    raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
  if value < 1:
    raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
  return value


def int_list(text: str) -> tuple[int, ...]:
  """ "1-10" or "2,4,8" -> a tuple of ints."""
  values: list[int] = []
  try:
    for part in text.split(","):
      if "-" in part:
        low, high = (int(x) for x in part.split("-"))
        values += range(low, high + 1)
      else:
        values.append(int(part))
  except ValueError:
    raise argparse.ArgumentTypeError(f'expected e.g. "1-10" or "2,4,8", got {text!r}') from None
  if not values or min(values) < 1:
    raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
  return tuple(values)


def add_decoding_options(parser: argparse.ArgumentParser, max_new_tokens: int) -> None:
  group = parser.add_argument_group("decoding")
  group.add_argument(
    "--gamma",
    type=gamma_value,
    default=None,
    help=f'draft tokens per iteration (1..{MAX_GAMMA}), or "auto" (measure alpha, c, r here '
    "and pick the best; default: the pair's recommended gamma, else 4)",
  )
  group.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
  group.add_argument("--top-k", type=int, default=0, help="0 = off")
  group.add_argument("--top-p", type=float, default=1.0, help="1 = off")
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
    type=chain_count,
    default=None,
    metavar="K",
    help=f"draft K chains of gamma tokens (2..{MAX_CHAINS}) and verify them in one "
    "tree-shaped target call (token verification; models with tree calls: T5, decoder-only)",
  )
  group.add_argument("--max-new-tokens", type=positive_int, default=max_new_tokens)
  group.add_argument("--seed", type=seed_value, default=0)
  group.add_argument("--repeats", type=positive_int, default=3, help="timed runs (median)")
  group.add_argument("--no-baseline", action="store_true", help="skip the autoregressive run")
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


def sampling_of(args) -> SamplingConfig:
  return SamplingConfig(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p)


def decode_settings(args, default_gamma: int = 4) -> DecodeSettings:
  adaptive = getattr(args, "adaptive", None)
  tree = getattr(args, "tree", None)
  if adaptive is not None and tree is not None:
    raise UsageError("--adaptive and --tree cannot be combined (yet)")
  if tree is not None and args.verification == "block":
    raise UsageError("--tree is verified by recursive rejection sampling: drop --verification")
  return DecodeSettings(
    gamma=default_gamma if args.gamma is None else args.gamma,
    max_new_tokens=args.max_new_tokens,
    sampling=sampling_of(args),
    verification=args.verification,
    seed=args.seed,
    adaptive=None if adaptive is None else AdaptiveDraft(threshold=adaptive),
    tree=tree,
  )


def resolve_gamma(target, draft, prompts, args, prompt_lengths=None) -> None:
  """Replaces --gamma auto by the tuned gamma (measured once, before the timed runs)."""
  if args.gamma != "auto":
    return
  from specsample.bench.tuning import tune_gamma

  choice = tune_gamma(
    target,
    draft,
    prompts,
    sampling=sampling_of(args),
    verification=args.verification,
    seed=args.seed,
    prompt_lengths=prompt_lengths,
  )
  predicted = ", ".join(f"{g}: {s:.2f}x" for g, s in choice.predicted_speedup.items())
  print(
    f"gamma auto -> {choice.gamma} (alpha {choice.alpha:.2f}, c {choice.c:.3f}, "
    f"r({choice.gamma + 1}) {choice.r[choice.gamma]:.2f}; predicted speedup by gamma {predicted})",
    file=sys.stderr,
  )
  args.gamma = choice.gamma


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
      lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as error:
      raise UsageError(f"--input-file {input_file} is not UTF-8 text ({error.reason})") from None
    texts = [line for line in lines if line.strip()]
    if not texts:
      raise UsageError(f"--input-file {input_file} has no non-empty lines")
    return texts
  if not texts:
    raise UsageError("give inputs as arguments or with --input-file")
  for number, text in enumerate(texts, start=1):
    if not text.strip():
      raise UsageError(f"input {number} is empty: give some text to decode")
  return texts


def check_new_file(path: str, *, overwrite: bool, what: str) -> None:
  """Before the work: `path` can be written, and is not an existing file unless `overwrite`."""
  target = pathlib.Path(path)
  if target.is_dir():
    raise UsageError(f"{what} {path} is a directory")
  if target.exists() and not overwrite:
    raise UsageError(f"{what} {path} exists; pass --overwrite to replace it")
  parent = target.parent if str(target.parent) else pathlib.Path(".")
  if not parent.is_dir():
    raise UsageError(f"{what} {path}: directory {parent} does not exist")
  if not os.access(parent, os.W_OK):
    raise UsageError(f"{what} {path}: directory {parent} is not writable")


def check_output_directory(path: str, names, *, overwrite: bool) -> None:
  """Before the work: the report directory can be made and written, and holds none of
  `names` unless `overwrite`."""
  directory = pathlib.Path(path)
  if directory.exists() and not directory.is_dir():
    raise UsageError(f"--out {path} is a file, not a directory")
  existing = [name for name in names if (directory / name).exists()]
  if existing and not overwrite:
    raise UsageError(
      f"--out {path} already holds {', '.join(existing)}; pass --overwrite to replace them"
    )
  probe = directory
  while not probe.exists():
    probe = probe.parent
  if not os.access(probe, os.W_OK):
    raise UsageError(f"--out {path}: {probe} is not writable")


def check_tokenizer(tokenizer, model, role: str = "target") -> None:
  """The tokenizer must fit the model: no token id past the model's vocabulary, and not
  a much smaller vocabulary (models pad theirs: T5 by its 100 sentinels to a multiple of
  128, some LLMs to multiples of 64-256; more than 5% missing means another tokenizer)."""
  have, need = int(tokenizer.vocab_size), int(model.vocab_size)
  if have > need:
    raise UsageError(
      f"the tokenizer has {have} tokens but the {role} model only {need}: not this model's "
      "tokenizer (--tokenizer / --vocab)"
    )
  if have < 0.95 * need:
    raise UsageError(
      f"the tokenizer has {have} tokens but the {role} model {need}: not this model's "
      "tokenizer (--tokenizer / --vocab)?"
    )


def check_weights_option(args) -> None:
  """--weights other than float32 keeps the arithmetic in float32: refused with another
  --dtype (checked before anything is loaded; --weights auto then means float32)."""
  weights = getattr(args, "weights", "float32")
  if weights not in ("auto", "float32") and args.dtype != "float32":
    raise UsageError(
      f"--weights {weights} keeps the arithmetic in float32: drop --dtype {args.dtype}"
    )


def resolve_weights(args, target_path: str | None) -> str:
  """--weights auto (the default) becomes the format the target checkpoint stores
  (`checkpoints.loader.stored_weight_format`: a GGUF's blocks, bfloat16 matrices, else
  float32), said on stderr when it is not float32; float32 with --dtype bfloat16, with
  --mesh, or without a target checkpoint (the bundled T5 pair). Sets and returns
  args.weights."""
  if getattr(args, "weights", "float32") != "auto":
    return args.weights
  args.weights = "float32"
  if target_path is not None and args.dtype == "float32" and not getattr(args, "mesh", None):
    from specsample.checkpoints.loader import stored_weight_format

    args.weights = stored_weight_format(target_path)
  if args.weights != "float32":
    kind = "its blocks" if args.weights == "gguf" else "bfloat16 matrices"
    print(
      f"weights: {args.weights} ({kind}, as the checkpoint stores them; --weights float32 "
      "for float32 matrices)",
      file=sys.stderr,
    )
  return args.weights


def resolve_activations(args) -> str:
  """--activations auto becomes int8 for block weights where the CPU kernel runs, float32
  otherwise; int8 without block weights is refused. Call after resolve_weights (and
  `say_activations` once the models loaded). Sets and returns args.activations."""
  from specsample.kernels import small_k

  requested = getattr(args, "activations", "auto")
  blocks = _resolved(args) == "gguf"
  if requested == "int8" and not blocks:
    raise UsageError(
      f"--activations int8 multiplies GGUF blocks: it needs --weights gguf (or auto on a "
      f"GGUF file), not --weights {args.weights}"
    )
  if requested == "auto":
    requested = "int8" if blocks and small_k.kernel_available() else "float32"
  args.activations = requested
  return requested


def say_activations(args) -> None:
  """With block weights, which arithmetic runs, on stderr (after the models loaded)."""
  from specsample.kernels import small_k

  if _resolved(args) != "gguf":
    return
  if activations(args) == "int8":
    isa = small_k.integer_instruction_set() or "XLA"
    how = f"8 bits per number in blocks of 32, integer dot products: {isa}"
    other = "--activations float32 for float32 arithmetic"
  else:
    how = "the float32 product of the dequantized weights"
    other = "--activations int8 for integer dot products"
  print(f"activations: {activations(args)} ({how}; {other})", file=sys.stderr)


def activations(args) -> str:
  """The resolved --activations ("int8" or "float32")."""
  value = getattr(args, "activations", "float32")
  if value == "auto":
    raise RuntimeError("--activations auto: call resolve_activations(args) first")
  return value


def gguf_blocks(args) -> bool:
  """--weights gguf: GGUF checkpoints load with their blocks kept (`load_model`)."""
  return _resolved(args) == "gguf"


def _resolved(args) -> str:
  weights = getattr(args, "weights", "float32")
  if weights == "auto":
    raise RuntimeError("--weights auto: call resolve_weights(args, target_path) first")
  return weights


def compact_weights(args, *models):
  """The models with --weights applied (bfloat16 weight matrices, float32 arithmetic);
  models without parameters (an n-gram draft) pass unchanged. With --weights gguf the
  models were loaded with their blocks: the first (the target) must have some."""
  if _resolved(args) == "float32":
    return models
  from specsample.models.weights import block_formats, with_weight_dtype

  if gguf_blocks(args):
    if not block_formats(models[0]):
      raise UsageError(
        "--weights gguf: the target has no Q8_0/Q4_0/Q4_1/Q5_0/Q4_K/Q6_K matrices (it is not "
        "a GGUF checkpoint of those types)"
      )
    return models

  return tuple(
    with_weight_dtype(model, args.weights) if hasattr(model, "params") else model
    for model in models
  )


def load_draft(
  spec: str, target, *, dtype: str, gguf_blocks: bool = False, activations: str = "float32"
):
  """--draft: a checkpoint; a feature draft's directory (read with the target's embedding
  and output rows); "bundled:feature" / "bundled:token" (SmolLM2's bundled drafts); or
  "ngram" / "ngram:N" (prompt lookup over n-grams up to N)."""
  if spec == "ngram" or spec.startswith("ngram:"):
    from specsample.models.ngram import NGramDraft

    size = spec.partition(":")[2] or "3"
    if not size.isdigit() or not 1 <= int(size) <= 8:
      raise UsageError(f"--draft {spec}: the n-gram size must be 1..8, e.g. ngram:3")
    return NGramDraft.for_target(target, max_ngram=int(size))
  from specsample.checkpoints import load_model
  from specsample.checkpoints.feature_draft import is_feature_draft_dir, load_feature_draft

  if spec.startswith("bundled:"):
    from specsample import bundled

    kind = spec.partition(":")[2]
    if kind not in bundled.SMOLLM2_DRAFTS:
      raise UsageError(f"--draft {spec}: the bundled drafts are bundled:feature, bundled:token")
    if not bundled.smollm2_draft_available(kind):
      raise UsageError(f"--draft {spec}: not shipped in {bundled.smollm2_draft_dir(kind)}")
    spec = str(bundled.smollm2_draft_dir(kind))
  if is_feature_draft_dir(spec):
    return load_feature_draft(spec, target, dtype=dtype)
  shared = _shares_embedding(spec)
  embedding = target.params["embed"]["embedding"] if shared and hasattr(target, "params") else None
  return load_model(
    spec,
    dtype=dtype,
    gguf_blocks=gguf_blocks,
    activations=activations if gguf_blocks else "float32",
    shared_embedding=embedding,
  )


def _shares_embedding(path: str) -> bool:
  """Whether the draft directory was saved without its input embedding (it shares its
  target's, `specsample_shared_embedding`)."""
  import json
  import os

  from specsample.checkpoints.decoder_only import SHARED_EMBEDDING_KEY

  config = os.path.join(path, "config.json")
  if not os.path.isfile(config):
    return False
  try:
    with open(config) as f:
      return bool(json.load(f).get(SHARED_EMBEDDING_KEY))
  except (OSError, ValueError):
    return False


def with_prompt_lookup(draft, target, choice: bool | None, *, default: bool):
  """--prompt-lookup / --no-prompt-lookup: the draft model behind n-gram prompt lookup
  (`LookupThenModel`), or the draft as it is. `choice` None takes `default`."""
  from specsample.models.lookup_draft import LookupThenModel
  from specsample.models.ngram import NGramDraft

  if isinstance(draft, NGramDraft):
    if choice:
      raise UsageError("--prompt-lookup goes with a draft model; --draft ngram is lookup alone")
    return draft
  if not (default if choice is None else choice):
    return draft
  return LookupThenModel.for_target(draft, target)
