"""Drafters: one object per draft shape, which the speculative iteration calls for its
steps 1, 2, 3 and 5 (drafters.base says what a drafter is)."""

from __future__ import annotations

from specsample.core.contract import lookup_parts, uses_target_features
from specsample.decoding.drafters.adaptive import AdaptiveDrafter
from specsample.decoding.drafters.base import Drafter, Proposal, Scored, Verdict
from specsample.decoding.drafters.chain import ChainDrafter
from specsample.decoding.drafters.dynamic_tree import DynamicTree, DynamicTreeDrafter
from specsample.decoding.drafters.features import FeatureDrafter
from specsample.decoding.drafters.tree import DraftTree, TreeDrafter


def make_drafter(draft, settings) -> Drafter:
  """The drafter of `settings.shape` (decoding.settings.SpeculativeSettings) for this
  draft model: a chain (a feature draft's, when the draft reads the target's features),
  adaptive length (of either chain), a tree of chains, or a dynamic tree. A new draft
  shape adds its case here; the loop is the same."""
  common = dict(draft=draft, gamma=settings.gamma, sampling=settings.sampling, rule=settings.rule)
  chain = FeatureDrafter if uses_target_features(draft) else ChainDrafter
  if settings.adaptive is not None:
    return AdaptiveDrafter(chain=chain(**common), adaptive=settings.adaptive)
  if settings.tree is not None:
    return TreeDrafter(**common, tree=settings.tree)
  if settings.dynamic_tree is not None:
    parts = lookup_parts(draft)  # prompt lookup in front: its continuation is a branch
    if parts is not None:
      model, lookup, trust_ngram = parts
      common.update(draft=model, lookup=lookup, trust_ngram=trust_ngram)
    return DynamicTreeDrafter(**common, tree=settings.dynamic_tree)
  return chain(**common)


__all__ = [
  "AdaptiveDrafter",
  "ChainDrafter",
  "DraftTree",
  "Drafter",
  "DynamicTree",
  "DynamicTreeDrafter",
  "FeatureDrafter",
  "Proposal",
  "Scored",
  "TreeDrafter",
  "Verdict",
  "make_drafter",
]
