"""Parity with Hugging Face transformers' T5 (PyTorch, CPU) on tiny random models.

Three flavours: v1.0 (ReLU, tied and rescaled output), v1.1 as transformers 5 writes it
(gated GELU, tied but unscaled), and v1.1 as the published Flan/T5.1.1 checkpoints are
laid out (separate lm_head). Built offline from configs, saved with save_pretrained,
loaded with our reader; logits to 1e-5, greedy tokens exactly.
"""

from __future__ import annotations

import json

import jax.numpy as jnp
import numpy as np
import pytest
import torch
from tiny_models import tiny_config
from transformers import T5Config as HFConfig
from transformers import T5ForConditionalGeneration

from specsample import SamplingConfig, generate
from specsample.checkpoints import CheckpointError, load_t5, save_hf_t5
from specsample.checkpoints.huggingface import hf_to_t5x_name, t5x_to_hf_name
from specsample.checkpoints.t5_params import expected_shapes, flatten
from specsample.models.t5 import T5

ENCODER = np.array([[5, 6, 7, 8, 9, 10, 1], [11, 12, 13, 1, 0, 0, 0], [14, 1, 0, 0, 0, 0, 0]])
DECODER = np.array([[0, 3, 4, 5, 6], [0, 7, 8, 9, 10], [0, 11, 2, 3, 4]])


def hf_model(flavour: str, seed: int = 0) -> T5ForConditionalGeneration:
  torch.manual_seed(seed)
  config = HFConfig(
    vocab_size=64,
    d_model=16,
    d_kv=4,
    d_ff=32,
    num_layers=2,
    num_decoder_layers=3,
    num_heads=3,
    feed_forward_proj="relu" if flavour == "v1.0" else "gated-gelu",
    tie_word_embeddings=flavour == "v1.0",
    dropout_rate=0.0,
    initializer_factor=0.5,
    decoder_start_token_id=0,
    pad_token_id=0,
    eos_token_id=1,
  )
  model = T5ForConditionalGeneration(config).eval()
  if flavour == "v1.1-untied":
    model.lm_head.weight = torch.nn.Parameter(torch.randn(64, 16) * 0.5)
  return model


def save(model: T5ForConditionalGeneration, flavour: str, directory, **kwargs) -> None:
  model.save_pretrained(directory, **kwargs)
  if flavour == "v1.1-untied":  # the layout of the published T5.1.1 / Flan-T5 files
    from safetensors.torch import load_file, save_file

    tensors = load_file(directory / "model.safetensors")
    tensors["lm_head.weight"] = model.lm_head.weight.detach().contiguous()
    save_file(tensors, directory / "model.safetensors", metadata={"format": "pt"})
    config = json.loads((directory / "config.json").read_text())
    config.pop("scale_decoder_outputs")
    config["tie_word_embeddings"] = False
    (directory / "config.json").write_text(json.dumps(config))


def hf_logits(model, encoder=ENCODER, decoder=DECODER) -> np.ndarray:
  with torch.no_grad():
    return model(
      input_ids=torch.tensor(encoder),
      attention_mask=torch.tensor(encoder > 0).long(),
      decoder_input_ids=torch.tensor(decoder),
    ).logits.numpy()


@pytest.mark.parametrize("flavour", ["v1.0", "v1.1-hf5", "v1.1-untied"])
def test_logits_and_greedy_tokens_match(flavour, tmp_path):
  reference = hf_model(flavour)
  save(reference, flavour, tmp_path)
  ours = load_t5(tmp_path)
  assert ours.config.num_decoder_layers == 3
  assert ours.config.tie_word_embeddings == (flavour != "v1.1-untied")
  assert ours.config.rescale_logits == (flavour == "v1.0")
  logits = np.asarray(ours.forward(jnp.asarray(ENCODER), jnp.asarray(DECODER)))
  np.testing.assert_allclose(logits, hf_logits(reference), atol=1e-5, rtol=1e-5)

  with torch.no_grad():
    expected = reference.generate(
      input_ids=torch.tensor(ENCODER),
      attention_mask=torch.tensor(ENCODER > 0).long(),
      do_sample=False,
      num_beams=1,
      max_new_tokens=12,
      use_cache=False,  # transformers' cache assumes as many decoder as encoder layers
    ).numpy()[:, 1:]  # drop the decoder start token
  prompts = [row[row > 0].tolist() for row in ENCODER]
  out = generate(ours, prompts, max_new_tokens=12, sampling=SamplingConfig(temperature=0.0))
  np.testing.assert_array_equal(np.asarray(out.tokens)[:, : expected.shape[1]], expected)


def test_sharded_safetensors_load_the_same(tmp_path):
  reference = hf_model("v1.1-hf5", seed=1)
  reference.save_pretrained(tmp_path / "one")
  reference.save_pretrained(tmp_path / "sharded", max_shard_size="20KB")
  assert (tmp_path / "sharded" / "model.safetensors.index.json").exists()
  one, sharded = load_t5(tmp_path / "one"), load_t5(tmp_path / "sharded")
  for path, leaf in flatten(one.params).items():
    assert np.array_equal(leaf, flatten(sharded.params)[path]), path


@pytest.mark.parametrize("family", ["t5.1.0", "t5.1.1"])
def test_export_to_hugging_face_round_trips(family, tmp_path):
  ours = T5.init_random(tiny_config(family), seed=4)
  save_hf_t5(ours, tmp_path)
  reference = T5ForConditionalGeneration.from_pretrained(tmp_path).eval()
  encoder, decoder = ENCODER % 48, DECODER % 48
  logits = np.asarray(ours.forward(jnp.asarray(encoder), jnp.asarray(decoder)))
  np.testing.assert_allclose(logits, hf_logits(reference, encoder, decoder), atol=1e-5, rtol=1e-5)
  back = load_t5(tmp_path)
  assert back.config == ours.config
  for path, leaf in flatten(ours.params).items():
    assert np.array_equal(leaf, flatten(back.params)[path]), path


def test_name_maps_are_inverse():
  for config in (tiny_config("t5.1.0"), tiny_config("t5.1.1")):
    for path in expected_shapes(config):
      assert hf_to_t5x_name(t5x_to_hf_name(path)[0])[0] == path


def test_bad_directories_fail_with_the_file_named(tmp_path):
  reference = hf_model("v1.1-hf5")
  reference.save_pretrained(tmp_path / "good")
  from safetensors.numpy import load_file, save_file

  good = load_file(tmp_path / "good" / "model.safetensors")
  config = (tmp_path / "good" / "config.json").read_text()

  missing = tmp_path / "missing"
  missing.mkdir()
  (missing / "config.json").write_text(config)
  save_file(
    {k: v for k, v in good.items() if "block.1.layer.1" not in k}, missing / "model.safetensors"
  )
  with pytest.raises(
    CheckpointError, match=r"missing .*missing arrays: .*encoder/layers_1/mlp/wi_0"
  ):
    load_t5(missing)

  wrong = tmp_path / "wrong_shape"
  wrong.mkdir()
  (wrong / "config.json").write_text(config.replace('"d_ff": 32', '"d_ff": 40'))
  (wrong / "model.safetensors").write_bytes((tmp_path / "good" / "model.safetensors").read_bytes())
  with pytest.raises(
    CheckpointError, match=r"wrong_shape.*has shape \(16, 32\), expected \(16, 40\)"
  ):
    load_t5(wrong)

  corrupt = tmp_path / "corrupt"
  corrupt.mkdir()
  (corrupt / "config.json").write_text(config)
  (corrupt / "model.safetensors").write_bytes(
    (tmp_path / "good" / "model.safetensors").read_bytes()[:5000]
  )
  with pytest.raises(CheckpointError, match=r"corrupt/model.safetensors: not a readable"):
    load_t5(corrupt)

  empty = tmp_path / "empty"
  empty.mkdir()
  (empty / "config.json").write_text(config)
  with pytest.raises(CheckpointError, match=r"empty: no model.safetensors"):
    load_t5(empty)

  other = tmp_path / "bert"
  other.mkdir()
  (other / "config.json").write_text('{"model_type": "bert"}')
  readable = r"is not one specsample reads .decoder-only: .*llama.*; T5: t5, mt5, umt5."
  with pytest.raises(CheckpointError, match=readable):
    load_t5(other)
