"""Draft shapes by name: one spelling for the command line's `--tree` and the bench's
`--shapes`.

  "token", "block"   the paper's chain of gamma tokens, verified token by token or as a block
  "adaptive"         a chain each row may stop early (`AdaptiveDraft`), verified token-wise
  "treeK"            K chains of gamma tokens from one root (K = 2..MAX_CHAINS), token-wise
  "dynamic"          a dynamic tree of `DynamicTree`'s default size, gamma deep
  "dynamic:N"        a dynamic tree of N nodes (1..MAX_NODES), gamma deep

`DraftShape.parse(name)` reads one; `.options(gamma)` gives `SpeculativeSettings.of`'s
keywords for it.
"""

from __future__ import annotations

import dataclasses

from specsample.decoding.adaptive import AdaptiveDraft
from specsample.decoding.drafters.dynamic_tree import MAX_NODES, DynamicTree
from specsample.decoding.drafters.tree import MAX_CHAINS

CHAIN_SHAPES = ("token", "block")  # the paper's chain, by its verification
SHAPE_HELP = (
  "'token' or 'block' (a chain of gamma, verified token-wise or as a block), 'adaptive' "
  f"(per-row length up to gamma), 'tree2'..'tree{MAX_CHAINS}' (K chains of gamma), "
  f"'dynamic' or 'dynamic:N' (a dynamic tree of N <= {MAX_NODES} nodes, gamma deep)"
)


@dataclasses.dataclass(frozen=True)
class DraftShape:
  """What each iteration drafts and how it is verified. `chains` K: a tree of K chains;
  `dynamic`: a dynamic tree of `nodes` nodes (None: DynamicTree's default)."""

  name: str
  verification: str = "token"
  adaptive: bool = False
  chains: int | None = None
  dynamic: bool = False
  nodes: int | None = None

  @classmethod
  def parse(cls, name: str) -> DraftShape:
    """A shape's name (module doc) -> its DraftShape; ValueError naming the bad part."""
    text = str(name).strip()
    if text in CHAIN_SHAPES:
      return cls(text, verification=text)
    if text == "adaptive":
      return cls(text, adaptive=True)
    kind, colon, count = text.partition(":")
    if kind == "dynamic":
      if not colon:
        return cls(text, dynamic=True)
      nodes = _count(count, 1, MAX_NODES, f"a dynamic tree takes 1..{MAX_NODES} nodes")
      return cls(text, dynamic=True, nodes=nodes)
    if text.startswith("tree") and not colon:
      chains = _count(text[4:], 2, MAX_CHAINS, f"a tree takes 2..{MAX_CHAINS} chains")
      return cls(f"tree{chains}", chains=chains)
    raise ValueError(f"unknown draft shape {text!r}; expected {SHAPE_HELP}")

  @property
  def is_tree(self) -> bool:
    return self.chains is not None or self.dynamic

  @property
  def tree(self) -> int | DynamicTree | None:
    """`SpeculativeSettings`'s `tree`: K chains, a dynamic tree of its full size, or None."""
    if self.dynamic:
      return DynamicTree() if self.nodes is None else DynamicTree(nodes=self.nodes)
    return self.chains

  def options(self, gamma: int) -> dict:
    """`SpeculativeSettings.of` keywords at this gamma (a dynamic tree gamma deep keeps at
    most the nodes its depth offers)."""
    options: dict = {"verification": self.verification}
    if self.adaptive:
      options["adaptive"] = AdaptiveDraft()
    tree = self.tree
    if isinstance(tree, DynamicTree):
      tree = dataclasses.replace(tree, nodes=min(tree.nodes, tree.offered(gamma)))
    if tree is not None:
      options["tree"] = tree
    return options


def _count(text: str, low: int, high: int, expected: str) -> int:
  try:
    value = int(text)
  except ValueError:
    raise ValueError(f"{expected}, got {text!r}") from None
  if not low <= value <= high:
    raise ValueError(f"{expected}, got {value}")
  return value
