"""The static settings of speculative decoding: one frozen, self-checking object.

`SpeculativeSettings` is what the library, the command line, the bench, the eval and the
compile-from-shapes tools pass around. Changing any field compiles a new program. It
checks itself when made (bad values raise a clear error before anything is traced), and
`check_pair` checks a target and draft against it.
"""

from __future__ import annotations

import dataclasses

from specsample.core.contract import lookup_parts, uses_target_features
from specsample.core.sampling import SamplingConfig
from specsample.core.verification import VERIFICATION_RULES, VerificationRule
from specsample.decoding.adaptive import AdaptiveDraft
from specsample.decoding.drafters.dynamic_tree import DynamicTree
from specsample.decoding.drafters.tree import DraftTree, supports_trees
from specsample.decoding.inputs import (
  check_feature_pair,
  check_model,
  check_positive_int,
  check_sampling,
)

MAX_GAMMA = 64  # draft tokens per iteration at most (the paper's best are 3-7)

DraftShape = AdaptiveDraft | DraftTree | DynamicTree  # None: one chain of gamma tokens


@dataclasses.dataclass(frozen=True)
class SpeculativeSettings:
  """Static settings of `speculative_generate`'s compiled program.

  Attributes:
    gamma: draft tokens per iteration (a tree's chain length or a dynamic tree's depth;
      adaptive's maximum), 1..64.
    max_new_tokens: tokens to generate per row at most.
    sampling: temperature / top-k / top-p, applied identically to draft and target.
    rule: "token", "block", "greedy", or a callable rule; a built-in rule becomes
      "greedy" at temperature 0.
    record_trace: record every iteration's draft tokens, accepted count and next token.
    shape: the draft's shape: None (one chain of gamma tokens), `AdaptiveDraft` (up to
      gamma per row) or `DraftTree` (K chains verified as a tree).
    stream: each iteration hands its kept tokens to the host (decoding.streaming: a
      native queue on CPU, an ordered callback elsewhere; off, nothing is compiled in).
  """

  gamma: int
  max_new_tokens: int
  sampling: SamplingConfig = dataclasses.field(default_factory=SamplingConfig)
  rule: str | VerificationRule = "token"
  record_trace: bool = False
  shape: DraftShape | None = None
  stream: bool = False

  def __post_init__(self):
    gamma = self.gamma
    if isinstance(gamma, str):
      raise ValueError(
        f"gamma must be a positive int, got {gamma!r}"
        + (
          ' (gamma="auto" measures this machine: use specsample.speculative_generate, or '
          "specsample.bench.tune_gamma once and pass its gamma)"
          if gamma == "auto"
          else ""
        )
      )
    gamma = check_positive_int("gamma", gamma)
    if gamma > MAX_GAMMA:
      raise ValueError(
        f"gamma must be <= {MAX_GAMMA}, got {gamma}: each iteration drafts gamma tokens one "
        "by one, and acceptance falls off long before that (the paper's best gammas are 3-7)"
      )
    sampling = check_sampling(self.sampling)
    rule = self.rule
    if not callable(rule) and rule not in VERIFICATION_RULES:
      raise ValueError(
        f"unknown verification {rule!r}; expected one of {VERIFICATION_RULES} or a callable rule"
      )
    if rule == "greedy" and not sampling.is_greedy:
      raise ValueError(
        "verification='greedy' is only exact at temperature 0; use 'token' or 'block' "
        f"for temperature {sampling.temperature}"
      )
    shape = self.shape
    if shape is not None and not isinstance(shape, DraftShape):
      raise TypeError(
        f"shape must be an AdaptiveDraft, a DraftTree, a DynamicTree or None, got {shape!r}"
      )
    if isinstance(shape, AdaptiveDraft) and callable(rule):
      raise ValueError(
        "adaptive draft length works with the built-in rules ('token', 'block', greedy); "
        "a custom rule sees fixed-length drafts only"
      )
    if isinstance(shape, DynamicTree) and (callable(rule) or rule == "block"):
      raise ValueError(
        "dynamic trees are verified by rejection sampling down the tree (greedy at "
        "temperature 0); verification must be 'token' (the default) with them"
      )
    if isinstance(shape, DynamicTree) and shape.nodes > shape.offered(gamma):
      raise ValueError(
        f"a dynamic tree {gamma} deep with branching {shape.branching} offers "
        f"{shape.offered(gamma)} nodes, fewer than nodes={shape.nodes}: raise gamma or "
        "branching, or lower nodes"
      )
    if isinstance(shape, DraftTree) and (callable(rule) or rule == "block"):
      raise ValueError(
        "tree drafts are verified by recursive rejection sampling over the chains (greedy "
        "at temperature 0); verification must be 'token' (the default) with them"
      )
    object.__setattr__(self, "gamma", gamma)
    object.__setattr__(
      self, "max_new_tokens", check_positive_int("max_new_tokens", self.max_new_tokens)
    )
    object.__setattr__(self, "sampling", sampling)
    object.__setattr__(
      self, "rule", "greedy" if sampling.is_greedy and not callable(rule) else rule
    )
    object.__setattr__(self, "record_trace", bool(self.record_trace))
    object.__setattr__(self, "stream", bool(self.stream))

  @classmethod
  def of(
    cls,
    *,
    gamma: int,
    max_new_tokens: int,
    sampling: SamplingConfig | None = None,
    verification: str | VerificationRule = "token",
    trace: bool = False,
    adaptive: AdaptiveDraft | bool | None = None,
    tree: DraftTree | DynamicTree | int | None = None,
  ) -> SpeculativeSettings:
    """The settings of `speculative_generate`'s keyword arguments (adaptive=True takes
    AdaptiveDraft's defaults; tree=K, K chains; tree=DynamicTree(nodes=N), a dynamic tree)."""
    if adaptive is True:
      adaptive = AdaptiveDraft()
    elif adaptive is False:
      adaptive = None
    if adaptive is not None and not isinstance(adaptive, AdaptiveDraft):
      raise TypeError(f"adaptive must be an AdaptiveDraft, True, False or None, got {adaptive!r}")
    if isinstance(tree, int) and not isinstance(tree, bool):
      tree = None if tree == 1 else DraftTree(num_chains=tree)
    if tree is not None and not isinstance(tree, DraftTree | DynamicTree):
      raise TypeError(
        f"tree must be a DraftTree, a DynamicTree or a number of chains, got {tree!r}"
      )
    if adaptive is not None and tree is not None:
      raise ValueError("adaptive draft length and tree drafts cannot be combined (yet)")
    return cls(
      gamma=gamma,
      max_new_tokens=max_new_tokens,
      sampling=check_sampling(sampling),
      rule=verification,
      record_trace=trace,
      shape=adaptive if adaptive is not None else tree,
    )

  @property
  def adaptive(self) -> AdaptiveDraft | None:
    return self.shape if isinstance(self.shape, AdaptiveDraft) else None

  @property
  def tree(self) -> DraftTree | None:
    return self.shape if isinstance(self.shape, DraftTree) else None

  @property
  def dynamic_tree(self) -> DynamicTree | None:
    return self.shape if isinstance(self.shape, DynamicTree) else None

  def check_pair(self, target, draft) -> None:
    """Raises a clear error if this target and draft cannot decode with these settings."""
    check_model("target", target)
    check_model("draft", draft)
    if draft.vocab_size != target.vocab_size:
      raise ValueError(
        f"draft and target must share a vocabulary: draft vocab_size={draft.vocab_size}, "
        f"target vocab_size={target.vocab_size}"
      )
    tree = self.tree
    if tree is not None:
      if tree.num_chains > target.vocab_size:
        raise ValueError(
          f"tree has {tree.num_chains} chains but the vocabulary {target.vocab_size}"
        )
      for role, model in (("target", target), ("draft", draft)):
        if not supports_trees(model):
          raise ValueError(
            f"the {role} model ({type(model).__name__}) has no extend_tree/keep_path, which "
            "tree drafts need (T5, DecoderOnly and MarkovLM have them)"
          )
    dynamic = self.dynamic_tree
    if dynamic is not None:
      if dynamic.branching > target.vocab_size:
        raise ValueError(
          f"dynamic tree branching {dynamic.branching} exceeds the vocabulary {target.vocab_size}"
        )
      if uses_target_features(draft):
        raise ValueError(
          "dynamic trees take a token-level draft; this draft reads the target's features "
          "(use it with a chain, or a DraftTree)"
        )
      parts = lookup_parts(draft)  # prompt lookup joins the tree as a branch of its own
      tree_draft = draft if parts is None else parts[0]
      for role, model in (("target", target), ("draft", tree_draft)):
        if not supports_trees(model):
          raise ValueError(
            f"the {role} model ({type(model).__name__}) has no extend_tree/keep_path, which "
            "dynamic trees need (T5, DecoderOnly and MarkovLM have them; prompt lookup "
            "joins a tree grown from a draft model)"
          )
    if uses_target_features(draft):
      check_feature_pair(target, draft, tree=tree)
