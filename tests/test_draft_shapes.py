"""Draft shapes by name (decoding.shapes): one parser for --tree and the bench's --shapes."""

import argparse

import pytest

from specsample.bench.pair_report import BenchSettings
from specsample.cli.options import draft_shape_name, tree_shape
from specsample.decoding import AdaptiveDraft, DynamicTree, SpeculativeSettings
from specsample.decoding.shapes import DraftShape


@pytest.mark.parametrize(
  "name, gamma, options",
  [
    ("token", 3, {"verification": "token"}),
    ("block", 3, {"verification": "block"}),
    ("adaptive", 3, {"verification": "token", "adaptive": AdaptiveDraft()}),
    ("tree3", 4, {"verification": "token", "tree": 3}),
    ("tree16", 2, {"verification": "token", "tree": 16}),
    # 16 nodes by default, but a tree 2 deep offers only 4 + 16 = 20, one deep only 4
    ("dynamic", 2, {"verification": "token", "tree": DynamicTree(nodes=16)}),
    ("dynamic", 1, {"verification": "token", "tree": DynamicTree(nodes=4)}),
    ("dynamic:8", 5, {"verification": "token", "tree": DynamicTree(nodes=8)}),
  ],
)
def test_each_name_gives_the_settings_of_its_shape(name, gamma, options):
  shape = DraftShape.parse(name)
  assert shape.name == name and shape.options(gamma) == options
  SpeculativeSettings.of(gamma=gamma, max_new_tokens=4, **options)  # valid settings


@pytest.mark.parametrize(
  "name, message",
  [
    ("tree1", "2..16 chains, got 1"),
    ("tree17", "2..16 chains, got 17"),
    ("treeX", "chains, got 'X'"),
    ("dynamic:0", "1..64 nodes, got 0"),
    ("dynamic:x", "nodes, got 'x'"),
    ("chain", "unknown draft shape 'chain'"),
    ("tree:3", "unknown draft shape"),
  ],
)
def test_bad_names_are_refused_with_what_was_wrong(name, message):
  with pytest.raises(ValueError, match=message):
    DraftShape.parse(name)


def test_the_tree_option_reads_its_shapes_through_the_same_parser():
  assert tree_shape("3") == 3 and tree_shape("tree5") == 5
  assert tree_shape("dynamic") == DynamicTree()
  assert tree_shape("dynamic:12") == DynamicTree(nodes=12)
  for text, message in [
    ("1", "--tree: a tree takes 2..16 chains, got 1"),
    ("dynamic:99", "--tree: a dynamic tree takes 1..64 nodes, got 99"),
    ("adaptive", "--tree takes a number of chains"),
    ("-2", "--tree takes a number of chains"),
  ]:
    with pytest.raises(argparse.ArgumentTypeError, match=message):
      tree_shape(text)


def test_the_bench_sweeps_canonical_names_and_refuses_unknown_ones():
  assert draft_shape_name(" tree4") == "tree4"
  with pytest.raises(argparse.ArgumentTypeError, match="chains, got ''"):
    draft_shape_name("tree")
  assert BenchSettings(shapes=("token", "dynamic:8")).shapes == ("token", "dynamic:8")
  with pytest.raises(ValueError, match="unknown draft shape 'fan'"):
    BenchSettings(shapes=("token", "fan"))
  with pytest.raises(ValueError, match="at least one draft shape"):
    BenchSettings(shapes=())
  # the phases and batch scaling run at the token-wise chain's best gamma: refused before
  # the sweep rather than failing after it
  with pytest.raises(ValueError, match="need 'token' among them"):
    BenchSettings(shapes=("tree2", "dynamic"))


def test_the_old_rules_flag_still_names_the_shapes():
  from specsample.cli.main import build_parser

  parser = build_parser()
  new = parser.parse_args(["bench", "--pair", "ende", "--shapes", "token", "dynamic:4"])
  old = parser.parse_args(["bench", "--pair", "ende", "--rules", "token", "tree2"])
  assert new.shapes == ["token", "dynamic:4"] and old.shapes == ["token", "tree2"]


def test_the_card_reads_reports_that_named_the_shape_a_rule():
  """The committed bench reports before the rename call the field "rule"."""
  from specsample.train.pipeline_data import best_point

  def point(key, shape, speedup):
    return {"temperature": 0.0, key: shape, "speedup": speedup}

  for key in ("shape", "rule"):
    sweep = [point(key, "token", 1.2), point(key, "tree2", 1.9), point(key, "token", 1.4)]
    report = {"sweep": sweep}
    assert best_point(report, 0.0)["speedup"] == 1.4
