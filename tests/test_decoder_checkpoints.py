"""Hugging Face decoder-only directories (and hub ids) loaded by `load_model`, against the
PyTorch models `transformers` builds from the same config (random weights, offline)."""

from __future__ import annotations

import json
import os
import shutil

import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers

from specsample import SamplingConfig, generate, load_model, speculative_generate
from specsample.checkpoints import CheckpointError, save_hf_decoder_only
from specsample.models import DecoderOnly

SMALL = {
  "vocab_size": 96, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
  "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 256,
  "bos_token_id": 1, "eos_token_id": 2,
}  # fmt: skip
ARCHITECTURES = {
  "llama-tied": ("LlamaConfig", "LlamaForCausalLM", {"tie_word_embeddings": True}),
  "llama3-rope-biases": (
    "LlamaConfig", "LlamaForCausalLM",
    {"attention_bias": True, "mlp_bias": True, "rope_scaling": {
      "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
      "original_max_position_embeddings": 64}},
  ),
  "llama-linear-rope": (
    "LlamaConfig", "LlamaForCausalLM", {"rope_scaling": {"rope_type": "linear", "factor": 4.0}}
  ),
  "mistral-window": ("MistralConfig", "MistralForCausalLM", {"sliding_window": 5}),
  "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {"tie_word_embeddings": True}),
  "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", {"head_dim": 16}),
}  # fmt: skip
TOKENS = np.random.default_rng(0).integers(3, 96, size=(2, 23))


def build(name: str, directory, **save_kwargs):
  """A random transformers model of `name`'s architecture, saved to `directory`."""
  config_class, model_class, extra = ARCHITECTURES[name]
  torch.manual_seed(0)
  config = getattr(transformers, config_class)(**SMALL, **extra)
  model = getattr(transformers, model_class)(config).eval()
  with torch.no_grad():  # non-trivial norms and biases, so their mapping is tested
    for param_name, param in model.named_parameters():
      if "norm" in param_name or "bias" in param_name:
        param.add_(0.1 * torch.randn_like(param))
  model.save_pretrained(directory, **save_kwargs)
  return model


def reference_logits(model, tokens: np.ndarray) -> np.ndarray:
  with torch.no_grad():
    return model(torch.tensor(tokens)).logits.numpy()


@pytest.mark.parametrize("name", sorted(ARCHITECTURES))
def test_logits_equal_transformers(name, tmp_path):
  reference = build(name, tmp_path)
  ours = load_model(tmp_path)
  assert isinstance(ours, DecoderOnly)
  logits = np.asarray(ours.forward(jnp.asarray(TOKENS)))
  np.testing.assert_allclose(logits, reference_logits(reference, TOKENS), atol=1e-4, rtol=0)


@pytest.mark.parametrize("name", ["llama3-rope-biases", "mistral-window", "qwen3"])
def test_prefill_extend_rewind_extend_equals_a_full_forward(name, tmp_path):
  build(name, tmp_path)
  model = load_model(tmp_path)
  full = np.asarray(model.forward(jnp.asarray(TOKENS)))  # [2, 23, vocab]
  # Rows with prompts of 9 and 4 tokens, then 6 tokens each; row 0 keeps 3, row 1 keeps 6.
  prompts = jnp.asarray(np.where(np.arange(9) < np.array([[9], [4]]), TOKENS[:, :9], 0))
  state, pending = model.init_state(prompts, jnp.array([9, 4]), 40)
  first = jnp.asarray(np.stack([TOKENS[0, 8:14], TOKENS[1, 3:9]]))
  assert pending.tolist() == [TOKENS[0, 8], TOKENS[1, 3]]
  logits, state = model.extend(state, first, jnp.array([6, 6]))
  np.testing.assert_allclose(logits[0], full[0, 8:14], atol=1e-4)
  np.testing.assert_allclose(logits[1], full[1, 3:9], atol=1e-4)
  state = model.rewind(state, jnp.array([8 + 3, 3 + 6]))  # row 0 drops 3 of its 6
  second = jnp.asarray(np.stack([TOKENS[0, 11:16], TOKENS[1, 9:14]]))
  logits, _ = model.extend(state, second, jnp.array([5, 5]))
  np.testing.assert_allclose(logits[0], full[0, 11:16], atol=1e-4)
  np.testing.assert_allclose(logits[1], full[1, 9:14], atol=1e-4)


def test_sharded_safetensors_and_speculative_greedy(tmp_path):
  reference = build("qwen2", tmp_path, max_shard_size="20KB")
  assert os.path.exists(tmp_path / "model.safetensors.index.json")
  model = load_model(tmp_path)
  logits = np.asarray(model.forward(jnp.asarray(TOKENS)))
  np.testing.assert_allclose(logits, reference_logits(reference, TOKENS), atol=1e-4, rtol=0)
  draft = DecoderOnly.init_random(model.config.replace(num_layers=1), seed=5)
  prompts = [TOKENS[0, :7].tolist(), TOKENS[1, :3].tolist()]
  greedy = SamplingConfig(temperature=0.0)
  plain = generate(model, prompts, max_new_tokens=16, sampling=greedy)
  for gamma in (2, 5):
    spec = speculative_generate(model, draft, prompts, gamma=gamma, max_new_tokens=16,
                                sampling=greedy)  # fmt: skip
    assert spec.sequences() == plain.sequences()


def test_our_export_loads_in_transformers(tmp_path):
  build("llama3-rope-biases", tmp_path / "hf")
  model = load_model(tmp_path / "hf")
  save_hf_decoder_only(model, tmp_path / "ours")
  again = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "ours").eval()
  logits = np.asarray(model.forward(jnp.asarray(TOKENS)))
  np.testing.assert_allclose(reference_logits(again, TOKENS), logits, atol=1e-4, rtol=0)


def test_generation_config_eos_list_ends_rows(tmp_path):
  build("llama-tied", tmp_path)
  (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [2, 7]}))
  model = load_model(tmp_path)
  assert model.eos_id == (2, 7)
  out = generate(model, [TOKENS[0, :5].tolist()] * 3, max_new_tokens=40,
                 sampling=SamplingConfig(temperature=3.0), seed=1)  # fmt: skip
  for row in out.sequences():
    assert all(token not in (2, 7) for token in row[:-1])  # either id ends a row


def hub_cache(tmp_path, repo_id: str, source) -> str:
  """A Hugging Face hub cache laid out by hand: models--owner--name/{refs,snapshots}."""
  cache = tmp_path / "hub"
  repo = cache / ("models--" + repo_id.replace("/", "--"))
  commit = "0123456789abcdef0123456789abcdef01234567"
  shutil.copytree(source, repo / "snapshots" / commit)
  (repo / "refs").mkdir(parents=True)
  (repo / "refs" / "main").write_text(commit)
  return str(cache)


def test_hub_ids_resolve_through_the_cache_offline(tmp_path, monkeypatch):
  import huggingface_hub.constants

  reference = build("llama-tied", tmp_path / "src")
  cache = hub_cache(tmp_path, "acme/tiny-llama", tmp_path / "src")
  monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", cache)
  monkeypatch.setenv("HF_HUB_OFFLINE", "1")
  model = load_model("acme/tiny-llama")
  logits = np.asarray(model.forward(jnp.asarray(TOKENS)))
  np.testing.assert_allclose(logits, reference_logits(reference, TOKENS), atol=1e-4, rtol=0)
  with pytest.raises(CheckpointError, match="acme/missing: not in the Hugging Face cache"):
    load_model("acme/missing")


def test_bad_checkpoints_get_clear_errors(tmp_path):
  build("llama-tied", tmp_path / "good")
  unknown = tmp_path / "gpt2"
  shutil.copytree(tmp_path / "good", unknown)
  config = json.loads((unknown / "config.json").read_text())
  (unknown / "config.json").write_text(json.dumps({**config, "model_type": "gpt_neo"}))
  with pytest.raises(CheckpointError, match="model_type 'gpt_neo'"):
    load_model(unknown)
  truncated = tmp_path / "truncated"
  shutil.copytree(tmp_path / "good", truncated)
  weights = truncated / "model.safetensors"
  weights.write_bytes(weights.read_bytes()[:5000])
  with pytest.raises(CheckpointError, match="model.safetensors: not a readable safetensors"):
    load_model(truncated)
  wrong = tmp_path / "wrong"
  shutil.copytree(tmp_path / "good", wrong)
  (wrong / "config.json").write_text(json.dumps({**config, "intermediate_size": 40}))
  with pytest.raises(
    CheckpointError, match=r"down_proj.weight has shape \(32, 48\).*needs \(32, 40\)"
  ):
    load_model(wrong)
  yarn = tmp_path / "yarn"
  shutil.copytree(tmp_path / "good", yarn)
  scaling = {"rope_type": "yarn", "factor": 4.0}
  (yarn / "config.json").write_text(json.dumps({**config, "rope_scaling": scaling}))
  with pytest.raises(CheckpointError, match="rope scaling 'yarn' is not supported"):
    load_model(yarn)
  with pytest.raises(CheckpointError, match="no such file or directory"):
    load_model(tmp_path / "nothing")


@pytest.mark.parametrize(
  "dtype, expected",
  [(torch.float32, "float32"), (torch.float16, "float32"), (torch.bfloat16, "bfloat16")],
)
def test_stored_weight_format_of_hf_directories(tmp_path, dtype, expected):
  """--weights auto reads the safetensors headers (sharded here): all-bfloat16 matrices
  -> bfloat16, whose widening to float32 is exact; float16 -> float32."""
  from specsample.checkpoints.loader import stored_weight_format

  build("qwen2", tmp_path / "float32").to(dtype).save_pretrained(
    tmp_path / "saved", max_shard_size="20KB"
  )
  assert os.path.exists(tmp_path / "saved" / "model.safetensors.index.json")
  assert stored_weight_format(tmp_path / "saved") == expected
