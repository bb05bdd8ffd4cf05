"""The model contract's optional abilities (core.contract Protocols): which model offers
which, and the helpers the loops ask instead of probing attribute names."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tiny_models import tiny_config

from specsample.core import contract
from specsample.core.contract import (
  FeatureDraftModel,
  FeatureTarget,
  GreedyDraft,
  LanguageModel,
  PromptPadding,
  TreeModel,
  WeightTraffic,
)
from specsample.core.sampling import argmax_tokens
from specsample.models import T5, DecoderOnly, DecoderOnlyConfig, FeatureDraft, MarkovLM
from specsample.models.feature_draft import feature_draft_config
from specsample.models.lookup_draft import LookupThenModel
from specsample.models.ngram import NGramDraft
from specsample.models.toy import MarkovFeatureDraft

DECODER = DecoderOnlyConfig(
  vocab_size=40, d_model=16, num_heads=2, num_kv_heads=1, head_dim=8, mlp_dim=24, num_layers=1,
  tie_word_embeddings=True,
)  # fmt: skip
ABILITIES = (
  LanguageModel,
  PromptPadding,
  TreeModel,
  FeatureTarget,
  FeatureDraftModel,
  WeightTraffic,
  GreedyDraft,
)


def abilities(model) -> set[str]:
  return {protocol.__name__ for protocol in ABILITIES if isinstance(model, protocol)}


@pytest.fixture(scope="module")
def models():
  decoder = DecoderOnly.init_random(DECODER)
  feature_draft = FeatureDraft.init_random(feature_draft_config(DECODER, 12))
  markov = MarkovLM.random(0, 40)
  return {
    "t5": T5.init_random(tiny_config(vocab=40)),
    "decoder": decoder,
    "markov": markov,
    "feature_draft": feature_draft,
    "markov_feature_draft": MarkovFeatureDraft(jnp.zeros((40, 40, 40))),
    "ngram": NGramDraft.for_target(decoder),
    "lookup_feature_draft": LookupThenModel.for_target(feature_draft, decoder),
    "lookup_markov": LookupThenModel.for_target(markov, decoder),
  }


EXPECTED = {
  "t5": {"LanguageModel", "PromptPadding", "TreeModel", "WeightTraffic"},
  "decoder": {"LanguageModel", "TreeModel", "FeatureTarget", "WeightTraffic"},
  "markov": {"LanguageModel", "TreeModel", "FeatureTarget"},
  "feature_draft": {"LanguageModel", "FeatureDraftModel", "WeightTraffic", "GreedyDraft"},
  "markov_feature_draft": {"LanguageModel", "FeatureDraftModel"},
  "ngram": {"LanguageModel", "WeightTraffic"},
  "lookup_feature_draft": {"LanguageModel", "FeatureDraftModel", "WeightTraffic", "GreedyDraft"},
  # A wrapper has the members; whether it reads features (`uses_target_features`) or knows
  # its weights is its model's answer (the helpers below: no, and no).
  "lookup_markov": {"LanguageModel", "FeatureDraftModel", "WeightTraffic", "GreedyDraft"},
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_model_offers_its_abilities(models, name):
  assert abilities(models[name]) == EXPECTED[name]


def test_helpers(models):
  assert contract.supports_trees(models["t5"]) and contract.supports_trees(models["markov"])
  assert not contract.supports_trees(models["feature_draft"])
  assert contract.has_features(models["decoder"]) and not contract.has_features(models["t5"])
  assert contract.prompt_pad_id(models["t5"]) == 0
  assert contract.prompt_pad_id(models["decoder"]) is None
  for name in ("feature_draft", "markov_feature_draft", "lookup_feature_draft"):
    assert contract.uses_target_features(models[name]), name
  for name in ("decoder", "markov", "ngram", "lookup_markov"):
    assert not contract.uses_target_features(models[name]), name
  assert contract.weights_per_call(models["ngram"]) == (0, 0)
  assert contract.weights_per_call(models["markov"]) is None
  assert contract.weights_per_call(models["lookup_markov"]) is None
  assert (
    contract.weights_per_call(models["lookup_feature_draft"])
    == models["feature_draft"].weights_per_call()
  )
  # greedy_extend: a model without extend_greedy gives its logits' argmax, flags and
  # top probability.
  markov = models["markov"]
  state, _ = markov.init_state(jnp.asarray([[3, 5, 7]], jnp.int32), jnp.asarray([3]), 4)
  tokens, one = jnp.asarray([[9, 2]], jnp.int32), jnp.asarray([2], jnp.int32)
  logits, expected = markov.extend(state, tokens, one)
  (best, bad, top), state = contract.greedy_extend(markov, state, tokens, one)
  assert best.tolist() == argmax_tokens(logits).tolist() and not bad.any()
  np.testing.assert_allclose(top, jnp.max(jax.nn.softmax(logits, axis=-1), axis=-1), rtol=1e-6)
  jax.tree.map(np.testing.assert_array_equal, state, expected)


def test_a_flag_alone_is_not_a_feature_draft():
  class Flagged:
    uses_target_features = True

  assert not contract.uses_target_features(Flagged())
  assert not contract.supports_trees(object())
