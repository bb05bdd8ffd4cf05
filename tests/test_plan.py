"""`specsample plan`: parameter, cache and activation bytes per device, before loading."""

from __future__ import annotations

import math

import pytest
from jax.sharding import PartitionSpec

from specsample.cli import main
from specsample.models.decoder_only import preset as decoder_preset
from specsample.models.t5 import PRESETS, preset
from specsample.scaling import DecodeShape, param_logical_axes, parse_mesh, partition_spec, plan
from specsample.scaling.plan import parameter_shapes, plan_warnings, resolve_config


@pytest.mark.parametrize("name", ["t5-small", "t5-base", "t5-large", "t5-3b", "t5-11b",
                                  "t5.1.1-xxl", "flan-t5-small"])  # fmt: skip
def test_parameter_counts_match_the_configs(name):
  config = preset(name)
  memory = plan(config, None, {"data": 1, "model": 1}, DecodeShape(1, 8, 8, dtype="float32"))
  assert memory.models[0].parameters == config.num_parameters
  assert memory.models[0].parameter_bytes == 4 * config.num_parameters


def test_t5_11b_is_about_eleven_billion_and_shards_over_the_model_axis():
  config = preset("t5-11b")
  shape = DecodeShape(batch=8, input_length=512, max_new_tokens=128, dtype="bfloat16")
  alone = plan(config, None, {"data": 1, "model": 1}, shape).models[0]
  assert 11.0e9 < alone.parameters < 11.5e9
  assert alone.parameter_bytes == 2 * alone.parameters
  sharded = plan(config, None, {"data": 1, "model": 8}, shape).models[0]
  # Everything but the norms and relative-position tables divides by 8.
  assert alone.parameter_bytes / 8 <= sharded.parameter_bytes < alone.parameter_bytes / 8 * 1.001
  assert sharded.cache_bytes * 8 == alone.cache_bytes


def test_cache_bytes_by_hand():
  config = preset("t5-small")  # 6 decoder layers, 8 heads x 64
  shape = DecodeShape(batch=4, input_length=32, max_new_tokens=27, gamma=4, dtype="float32")
  memory = plan(config, None, {"data": 2, "model": 2}, shape)
  self_attention = 6 * 2 * 4 * (27 + 4 + 1) * 8 * 64 * 4
  cross_attention = 6 * 2 * 4 * 32 * 8 * 64 * 4
  assert memory.models[0].cache_bytes == (self_attention + cross_attention) // 4
  llama = decoder_preset("llama-134m")
  memory = plan(llama, None, {"data": 1, "model": 1}, shape)
  assert memory.models[0].cache_bytes == 12 * 2 * 4 * (32 + 32) * 12 * 64 * 4
  assert memory.models[0].parameters == llama.num_parameters


def test_rules_give_the_t5x_style_specs():
  mesh = {"data": 2, "model": 4}
  cases = {
    "token_embedder/embedding": ((32128, 512), PartitionSpec("model", None)),
    "decoder/layers_0/self_attention/query/kernel": ((512, 512), PartitionSpec(None, "model")),
    "decoder/layers_0/self_attention/out/kernel": ((512, 512), PartitionSpec("model", None)),
    "encoder/layers_1/mlp/wi_0/kernel": ((512, 1024), PartitionSpec(None, "model")),
    "encoder/layers_1/mlp/wo/kernel": ((1024, 512), PartitionSpec("model", None)),
    "decoder/logits_dense/kernel": ((512, 32128), PartitionSpec(None, "model")),
    "decoder/decoder_norm/scale": ((512,), PartitionSpec(None)),
    # 6 heads do not divide by 4: replicated, not split unevenly.
    "decoder/relpos_bias/rel_embedding": ((6, 32), PartitionSpec(None, None)),
  }
  for path, (shape, expected) in cases.items():
    assert partition_spec(param_logical_axes(path, len(shape)), shape, mesh) == expected, path
  assert set(parameter_shapes(preset("t5.1.1-small"))) >= {"decoder/logits_dense/kernel"}
  with pytest.raises(ValueError, match="no partitioning rule"):
    param_logical_axes("decoder/mystery/kernel", 2)


def test_fits_and_mesh_parsing():
  shape = DecodeShape(batch=32, input_length=512, max_new_tokens=128, dtype="bfloat16")
  single = plan(preset("t5-11b"), preset("t5-small"), {"data": 1, "model": 1}, shape)
  assert not single.fits("tpu-v4") and not single.fits("a100-40gb") and single.fits("h200")
  pod = plan(preset("t5-11b"), preset("t5-small"), parse_mesh("data=2,model=4"), shape)
  assert pod.fits("tpu-v4") and pod.total_bytes < single.total_bytes / 4
  assert parse_mesh("model=8") == {"data": 1, "model": 8}
  assert parse_mesh(None, device_count=4) == {"data": 4, "model": 1}
  for bad in ("data=2;model=4", "batch=2", "data=x"):
    with pytest.raises(ValueError, match="mesh"):
      parse_mesh(bad)
  with pytest.raises(ValueError, match="needs 8 devices"):
    parse_mesh("data=2,model=4", device_count=4)
  with pytest.raises(ValueError, match="unknown accelerator"):
    pod.fits("tpu-v99")
  with pytest.raises(ValueError, match="batch"):
    DecodeShape(batch=0, input_length=1, max_new_tokens=1)


def test_resolve_config_and_the_command(capsys, tmp_path):
  assert resolve_config("t5-large") == PRESETS["t5-large"]
  assert resolve_config("llama-134m") == decoder_preset("llama-134m")
  with pytest.raises(ValueError, match="neither a preset"):
    resolve_config(str(tmp_path))
  argv = ["plan", "--target", "t5-11b", "--draft", "t5-small", "--mesh", "data=2,model=4",
          "--batch", "32", "--accelerator", "tpu-v4", "tpu-v5e"]  # fmt: skip
  assert main(argv) == 0
  out = capsys.readouterr().out
  assert "| target | 11,307.3M |" in out and "tpu-v4 (32.00 GiB per device): fits" in out
  assert "h100" not in out
  assert main(["plan", "--target", "t5-11b", "--accelerator", "tpu-v5e"]) == 0
  assert "tpu-v5e (16.00 GiB per device): does NOT fit" in capsys.readouterr().out
  assert math.isclose(preset("t5-11b").num_parameters / 1e9, 11.3, abs_tol=0.05)


def test_impossible_or_wasteful_meshes_are_refused_or_said(capsys):
  """A repeated axis and absurd device counts are refused; a batch the data axis does not
  divide, and a model axis that divides none of a model's split dimensions, are said."""
  with pytest.raises(ValueError, match="names the data axis twice"):
    parse_mesh("data=2,data=3")
  with pytest.raises(ValueError, match="1,000,000,000,000 devices; at most 65,536"):
    parse_mesh("data=1000000,model=1000000")
  shape = DecodeShape(batch=2, input_length=16, max_new_tokens=8)
  small = preset("t5-small")  # 8 heads, MLP 2048, vocabulary 32128
  assert plan_warnings(small, None, {"data": 2, "model": 1}, shape) == []
  (padded,) = plan_warnings(small, None, {"data": 3, "model": 1}, shape)
  assert padded.startswith("batch 2 over data=3: padded to 3 rows (1 of padding")
  (whole,) = plan_warnings(small, small, {"data": 1, "model": 3}, shape, {"data": 1, "model": 1})
  assert whole.startswith("model=3 does not divide the target's")
  fraction = float(whole.split("holding ")[1].split("%")[0])
  assert 50 < fraction <= 100  # the attention and MLP matrices, most of the model
  assert main(["plan", "--target", "t5-small", "--mesh", "data=3", "--batch", "2"]) == 0
  err = capsys.readouterr().err
  assert err.startswith("warning: batch 2 over data=3: padded to 3 rows")
