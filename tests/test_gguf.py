"""GGUF reading: SmolLM2 against transformers' own GGUF loader, tiny files of every tensor
type against their source weights, and bad files."""

from __future__ import annotations

import os

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from tiny_gguf import K_QUANT_SCALES, LARGE, SMALL, permute, write_tiny
from tokenizer_files import SMOLLM2, needs_smollm2

from specsample.checkpoints import CheckpointError
from specsample.checkpoints.architectures import read_gguf
from specsample.checkpoints.formats.gguf import gguf_tensor_types, read_gguf_metadata

# Max abs error allowed, as a fraction of the tensor's max |w|.
TOLERANCE = {"F32": 0.0, "F16": 1e-3, "BF16": 8e-3, "Q8_0": 1 / 127, "Q4_0": 1 / 8, "Q4_1": 2 / 15}


def inverse_by_index(stored: np.ndarray, heads: int) -> np.ndarray:
  """The HF rows whose permutation is `stored`, found by permuting row indices."""
  index = permute(np.arange(stored.shape[0]), heads)
  source = np.empty_like(stored)
  source[index] = stored
  return source


# llama.cpp's tensor names -> transformers', spelled out again here by their naming rules
# (not imported from architectures/llama.py): the test writes files by this table, so a
# wrong entry there fails here instead of agreeing with itself.
HF_NAMES = {
  "token_embd.weight": "model.embed_tokens.weight",
  "output_norm.weight": "model.norm.weight",
  "attn_norm.weight": "input_layernorm.weight",
  "attn_output.weight": "self_attn.o_proj.weight",
  "ffn_norm.weight": "post_attention_layernorm.weight",
  # attn_q.weight -> self_attn.q_proj.weight, attn_q.bias -> self_attn.q_proj.bias, ...
  **{f"attn_{x}.{p}": f"self_attn.{x}_proj.{p}" for x in "qkv" for p in ("weight", "bias")},
  **{f"attn_{x}_norm.weight": f"self_attn.{x}_norm.weight" for x in "qk"},
  **{f"ffn_{x}.weight": f"mlp.{x}_proj.weight" for x in ("gate", "up", "down")},
}


def to_hf(name: str) -> str:
  if name in HF_NAMES:
    return HF_NAMES[name]
  _, layer, rest = name.split(".", 2)
  return f"model.layers.{layer}.{HF_NAMES[rest]}"


# --- (a) SmolLM2 against transformers ---------------------------------------------------


@pytest.fixture(scope="module")
def transformers_smollm2():
  import torch
  from transformers import AutoModelForCausalLM

  directory, filename = os.path.split(SMOLLM2)
  model = AutoModelForCausalLM.from_pretrained(directory, gguf_file=filename, dtype=torch.float32)
  state = {name: tensor.detach().numpy() for name, tensor in model.state_dict().items()}
  return model.config, state


@pytest.fixture(scope="module")
def ours_smollm2():
  return read_gguf(SMOLLM2)


@needs_smollm2
def test_smollm2_tensors_equal_transformers(transformers_smollm2, ours_smollm2):
  _, theirs = transformers_smollm2
  config, ours = ours_smollm2
  assert config["tie_word_embeddings"]
  assert set(ours) == set(theirs) - {"lm_head.weight"}
  np.testing.assert_array_equal(theirs["lm_head.weight"], ours["model.embed_tokens.weight"])
  for name, value in ours.items():
    assert value.dtype == np.float32 and value.shape == theirs[name].shape, name
    np.testing.assert_array_equal(value, theirs[name], err_msg=name)


@needs_smollm2
def test_smollm2_config_equals_transformers(transformers_smollm2, ours_smollm2):
  theirs, _ = transformers_smollm2
  config, _ = ours_smollm2
  for key in (
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "max_position_embeddings",
    "tie_word_embeddings",
    "bos_token_id",
    "eos_token_id",
    "pad_token_id",
    "model_type",
  ):
    assert config[key] == getattr(theirs, key), key
  assert config["rms_norm_eps"] == pytest.approx(theirs.rms_norm_eps, rel=1e-6)
  assert config["rope_theta"] == theirs.rope_parameters["rope_theta"] == 100000.0
  assert config["architectures"] == ["LlamaForCausalLM"] and "rope_scaling" not in config
  assert (config["hidden_size"], config["num_hidden_layers"], config["vocab_size"]) == (
    576,
    30,
    49152,
  )


@needs_smollm2
def test_smollm2_metadata_and_types():
  types = gguf_tensor_types(SMOLLM2)
  assert len(types) == 272 and set(types.values()) == {"F32", "Q8_0", "Q4_1"}
  assert types["token_embd.weight"] == "Q8_0" and types["blk.0.attn_q.weight"] == "Q4_1"
  metadata = read_gguf_metadata(SMOLLM2)
  assert metadata["general.architecture"] == "llama"
  assert metadata["tokenizer.ggml.pre"] == "smollm"
  assert len(metadata["tokenizer.ggml.tokens"]) == 49152
  assert metadata["tokenizer.ggml.tokens"][2] == "<|im_end|>"
  assert isinstance(metadata["llama.rope.freq_base"], float)
  assert metadata["tokenizer.ggml.add_bos_token"] is False


# --- (b) every tensor type, and the un-permutation ---------------------------------------


@pytest.mark.parametrize(
  "type_name", ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q4_K", "Q5_K", "Q6_K"]
)
def test_tiny_llama_of_each_type(tmp_path, type_name):
  qtype = Q[type_name]
  s = LARGE if type_name in K_QUANT_SCALES else SMALL
  path = tmp_path / f"tiny-{type_name}.gguf"
  stored, sources = write_tiny(path, qtype, s=s)
  assert gguf_tensor_types(path)["blk.1.ffn_down.weight"] == type_name
  config, tensors = read_gguf(path)
  assert (config["hidden_size"], config["head_dim"], config["num_key_value_heads"]) == (
    s["d"],
    s["head_dim"],
    s["kv"],
  )
  assert config["tie_word_embeddings"] and config["vocab_size"] == s["vocab"]
  assert set(tensors) == {to_hf(name) for name in stored}
  for name, values in stored.items():
    ours = tensors[to_hf(name)]
    assert ours.shape == values.shape and ours.dtype == np.float32, name
    assert ours.flags.writeable, name  # a copy, not a view of the memory-mapped file
    if ".attn_q." in name or ".attn_k." in name:
      heads = s["kv"] if ".attn_k." in name else s["heads"]
      expected = inverse_by_index(values, heads)
      assert not np.array_equal(expected, values)  # the permutation does move rows
      np.testing.assert_array_equal(permute(ours, heads), values, err_msg=name)
    else:
      expected = values
    np.testing.assert_array_equal(ours, expected, err_msg=name)  # exactly the stored bytes
    if name in sources:  # and close to the weights before quantization
      source = sources[name]
      error = np.abs(ours - source).max()
      assert error <= TOLERANCE.get(type_name, 0.0) * np.abs(source).max(), (name, error)


def test_dtype_option(tmp_path):
  stored, _ = write_tiny(tmp_path / "tiny.gguf", Q.Q8_0)
  _, half = read_gguf(tmp_path / "tiny.gguf", dtype="float16")
  _, brain = read_gguf(tmp_path / "tiny.gguf", dtype="bfloat16")
  embedding = stored["token_embd.weight"]
  assert half["model.embed_tokens.weight"].dtype == np.float16
  assert str(brain["model.embed_tokens.weight"].dtype) == "bfloat16"
  np.testing.assert_allclose(half["model.embed_tokens.weight"], embedding, rtol=1e-3, atol=1e-3)
  with pytest.raises(ValueError, match="dtype"):
    read_gguf(tmp_path / "tiny.gguf", dtype="int8")


@pytest.mark.parametrize("arch", ["qwen2", "qwen3"])
def test_qwen_files_are_not_unpermuted(tmp_path, arch):
  """Qwen2 (q/k/v biases) and Qwen3 (q/k norms, head_dim 128 != d_model / heads, from
  attention.key_length) are stored unpermuted; transformers reads the same tensors."""
  import torch
  from transformers import AutoModelForCausalLM

  s = SMALL | ({"head_dim": 128} if arch == "qwen3" else {})
  key_length = {"attention.key_length": s["head_dim"]} if arch == "qwen3" else {}
  stored, _ = write_tiny(tmp_path / f"{arch}.gguf", arch=arch, s=s, metadata=key_length)
  config, tensors = read_gguf(tmp_path / f"{arch}.gguf")
  assert config["model_type"] == arch and config["head_dim"] == s["head_dim"]
  assert config["architectures"] == [f"{arch.capitalize()}ForCausalLM"]
  assert set(tensors) == {to_hf(name) for name in stored}
  for name, values in stored.items():
    np.testing.assert_array_equal(tensors[to_hf(name)], values, err_msg=name)
  extra = "self_attn.q_proj.bias" if arch == "qwen2" else "self_attn.q_norm.weight"
  assert f"model.layers.1.{extra}" in tensors
  model = AutoModelForCausalLM.from_pretrained(
    tmp_path, gguf_file=f"{arch}.gguf", dtype=torch.float32
  )
  theirs = model.state_dict()
  assert set(theirs) - set(tensors) == {"lm_head.weight"}
  for name, value in tensors.items():
    np.testing.assert_array_equal(value, theirs[name].numpy(), err_msg=name)


def test_untied_output_rope_freqs_and_scaling(tmp_path):
  s = SMALL
  stored, _ = write_tiny(
    tmp_path / "untied.gguf",
    extra={"output.weight": (s["vocab"], s["d"]), "rope_freqs.weight": (s["head_dim"] // 2,)},
  )
  config, tensors = read_gguf(tmp_path / "untied.gguf")
  assert not config["tie_word_embeddings"]
  np.testing.assert_array_equal(tensors["lm_head.weight"], stored["output.weight"])
  np.testing.assert_array_equal(tensors["rope_freqs"], stored["rope_freqs.weight"])

  scaled = {"llama.rope.scaling.factor": 4.0}
  write_tiny(tmp_path / "linear.gguf", strings={"llama.rope.scaling.type": "linear"}, floats=scaled)
  config, _ = read_gguf(tmp_path / "linear.gguf")
  assert config["rope_scaling"] == {"rope_type": "linear", "factor": 4.0}
  write_tiny(
    tmp_path / "yarn.gguf",
    strings={"llama.rope.scaling.type": "yarn"},
    floats=scaled,
    metadata={"rope.scaling.original_context_length": 32},
  )
  config, _ = read_gguf(tmp_path / "yarn.gguf")
  assert config["rope_scaling"] == {
    "rope_type": "yarn",
    "factor": 4.0,
    "original_max_position_embeddings": 32,
  }
  write_tiny(tmp_path / "odd.gguf", strings={"llama.rope.scaling.type": "longrope"}, floats=scaled)
  assert_fails(tmp_path / "odd.gguf", "rope scaling type 'longrope' is not supported")


# --- (c) bad files ---------------------------------------------------------------------


def assert_fails(path, match: str, reader=read_gguf):
  with pytest.raises(CheckpointError, match=match) as caught:
    reader(path)
  assert os.fspath(path) in str(caught.value)


def test_truncated_and_foreign_files(tmp_path):
  good = tmp_path / "good.gguf"
  write_tiny(good, Q.Q8_0)
  data = good.read_bytes()
  for cut in (12, 200, len(data) - 64):
    truncated = tmp_path / f"cut{cut}.gguf"
    truncated.write_bytes(data[:cut])
    assert_fails(truncated, "not a readable GGUF file")
  text = tmp_path / "model.gguf"
  text.write_text("this is not a GGUF file\n" * 20)
  assert_fails(text, "magic")
  empty = tmp_path / "empty.gguf"
  empty.write_bytes(b"")
  assert_fails(empty, "not a readable GGUF file")
  assert_fails(tmp_path / "absent.gguf", "no such GGUF file")
  assert_fails(text, "not a readable GGUF file", reader=read_gguf_metadata)
  assert_fails(text, "not a readable GGUF file", reader=gguf_tensor_types)


def test_unknown_architecture_and_missing_tensor(tmp_path):
  write_tiny(tmp_path / "bert.gguf", arch="bert")
  assert_fails(tmp_path / "bert.gguf", "architecture 'bert' is not supported")
  write_tiny(tmp_path / "missing.gguf", skip=("blk.1.ffn_up.weight",))
  assert_fails(tmp_path / "missing.gguf", r"missing tensors .*model\.layers\.1\.mlp\.up_proj")
  write_tiny(tmp_path / "moe.gguf", extra={"blk.0.ffn_gate_inp.weight": (4, SMALL["d"])})
  assert_fails(tmp_path / "moe.gguf", "unexpected tensor 'blk.0.ffn_gate_inp.weight'")


def test_shape_that_does_not_fit_the_metadata(tmp_path):
  write_tiny(tmp_path / "wrong.gguf", metadata={"feed_forward_length": 96})
  assert_fails(tmp_path / "wrong.gguf", r"blk\.0\.ffn_gate\.weight.* expected \(96, 64\)")


def test_unsupported_tensor_types(tmp_path, monkeypatch):
  write_tiny(tmp_path / "i32.gguf", as_int32=("blk.1.ffn_up.weight",))
  assert_fails(tmp_path / "i32.gguf", "has type I32, which the gguf package cannot dequantize")

  write_tiny(tmp_path / "q4.gguf", Q.Q4_0)
  monkeypatch.delitem(gguf.quants._type_traits, Q.Q4_0)
  assert_fails(tmp_path / "q4.gguf", "has type Q4_0, which the gguf package cannot dequantize")


@pytest.mark.parametrize(
  "type_name, expected",
  [("F32", "float32"), ("F16", "float32"), ("BF16", "bfloat16"), ("Q8_0", "gguf"),
   ("Q4_1", "gguf"), ("Q4_K", "gguf"), ("Q6_K", "gguf"), ("Q5_K", "float32")],
)  # fmt: skip
def test_stored_weight_format_of_each_type(tmp_path, type_name, expected):
  """--weights auto: blocks the kernel keeps -> gguf; all-bfloat16 matrices -> bfloat16
  (widening is exact); float16 and block types the kernel does not keep -> float32."""
  from specsample.checkpoints.loader import stored_weight_format

  path = tmp_path / f"tiny-{type_name}.gguf"
  write_tiny(path, Q[type_name], s=LARGE if type_name in K_QUANT_SCALES else SMALL)
  assert stored_weight_format(path) == expected


@needs_smollm2
def test_stored_weight_format_of_smollm2_and_its_resolution():
  """SmolLM2's Q4_1 + Q8_0 file -> gguf; weights "auto" takes it, except with dtype
  bfloat16 or sharded models (float32); an explicit choice stays."""
  from specsample.checkpoints.loader import stored_weight_format
  from specsample.pair_arithmetic import resolve_weights

  assert stored_weight_format(SMOLLM2) == "gguf"

  def resolved(weights="auto", dtype="float32", sharded=False):
    return resolve_weights(weights, SMOLLM2, dtype=dtype, sharded=sharded)

  assert resolved() == "gguf"
  assert resolved(dtype="bfloat16") == "float32"
  assert resolved(sharded=True) == "float32"
  assert resolved(weights="bfloat16") == "bfloat16"
  assert resolve_weights("auto", None, dtype="float32", sharded=False) == "float32"
  with pytest.raises(ValueError, match="drop dtype"):
    resolved(weights="gguf", dtype="bfloat16")
