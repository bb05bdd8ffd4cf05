"""Speculative programs compiled from shapes alone (specsample.scaling.abstract)."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from specsample.models.decoder_only import DecoderOnlyConfig
from specsample.models.t5 import preset
from specsample.models.t5.config import T5Config
from specsample.scaling.abstract import abstract_model, compile_from_shapes
from specsample.scaling.plan import DecodeShape

# T5-large + T5-small shapes (800M parameters, bfloat16, 512-token inputs) compile within
# this many seconds on CI's 2-core machine; a bound that catches a program that blew up
# (e.g. unrolled layers or loops), not a timing claim.
T5_LARGE_COMPILE_BOUND_SECONDS = 600


def test_abstract_models_hold_no_arrays():
  model = abstract_model(preset("t5-11b"), "bfloat16")
  leaves = jax.tree_util.tree_leaves(model)
  assert leaves and all(isinstance(leaf, jax.ShapeDtypeStruct) for leaf in leaves)
  assert sum(leaf.size for leaf in leaves) == 11_307_321_344  # the paper's T5-XXL
  assert {leaf.dtype for leaf in leaves} == {np.dtype("bfloat16")}


@pytest.mark.parametrize("family", ["t5", "decoder_only"])
def test_tiny_programs_compile_with_a_memory_analysis(family):
  if family == "t5":
    target = T5Config(
      vocab_size=64, d_model=32, num_heads=2, head_dim=16, mlp_dim=64,
      num_encoder_layers=1, num_decoder_layers=2,
    )  # fmt: skip
    draft = target.replace(num_decoder_layers=1)
  else:
    target = DecoderOnlyConfig(
      vocab_size=64, d_model=32, num_heads=4, num_kv_heads=2, head_dim=8, mlp_dim=64,
      num_layers=2,
    )  # fmt: skip
    draft = target.replace(num_layers=1)
  shape = DecodeShape(batch=2, input_length=12, max_new_tokens=6, gamma=3, dtype="bfloat16")
  result = compile_from_shapes(target, draft, shape)
  parameter_bytes = 2 * (result.target_parameters + result.draft_parameters)
  assert result.argument_bytes >= parameter_bytes  # the weights are the program's inputs
  assert result.temp_bytes > 0 and result.compile_seconds > 0
  assert result.plan_bytes >= parameter_bytes
  assert result.as_dict()["xla_bytes"] == result.xla_bytes


@pytest.mark.slow
def test_t5_large_with_t5_small_compiles_within_the_bound():
  shape = DecodeShape(batch=1, input_length=512, max_new_tokens=64, gamma=3, dtype="bfloat16")
  result = compile_from_shapes(preset("t5-large"), preset("t5-small"), shape)
  assert result.lower_seconds + result.compile_seconds < T5_LARGE_COMPILE_BOUND_SECONDS
  assert result.argument_bytes >= 2 * (result.target_parameters + result.draft_parameters)
  # plan counts the same weights XLA takes as arguments, plus caches and activations
  assert result.argument_bytes < result.plan_bytes < 1.2 * result.argument_bytes + (1 << 28)
  assert result.temp_bytes > 0
