"""Gemma 3's text architecture in `DecoderOnly` (random small configs): local sliding-window
layers between global ones, post-norms, (1 + scale) norms, scaled embeddings, GeGLU and the
query scale. One multi-token extend equals token-by-token steps, rewinds continue exactly,
tree calls (static `TreeLayout` and per-row `RowTrees`) score each chain like a plain call,
and the window is smaller than the context so that it matters. The real Gemma 3 270M:
tests/test_gemma3_checkpoint.py."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tiny_models import assert_tree_chains_score_like_plain_calls

from specsample.core.dynamic_tree import RowTrees
from specsample.core.tree import TreeLayout
from specsample.kernels import decoder_layer
from specsample.models.decoder_only import DecoderOnly, DecoderOnlyConfig, GemmaLayers

# 4 layers, every 3rd global (as Gemma 3's every 6th), a window of 3 positions.
GEMMA = DecoderOnlyConfig(
  vocab_size=64, d_model=32, num_heads=4, num_kv_heads=1, head_dim=16, mlp_dim=48,
  num_layers=4, rope_theta=1_000_000.0, qk_norm=True,
  gemma=GemmaLayers(query_pre_attn_scalar=24.0, local_layers=(0, 1, 3), local_window=3,
                    local_rope_theta=10_000.0),
  tie_word_embeddings=True, layer_norm_epsilon=1e-6, eos_id=1, pad_id=0,
)  # fmt: skip


def _with(**gemma_changes) -> DecoderOnlyConfig:
  """GEMMA with some of its Gemma options changed."""
  return GEMMA.replace(gemma=GEMMA.gemma.replace(**gemma_changes))


def _model(config=GEMMA, seed=0) -> DecoderOnly:
  """Random weights, the norms' scales too (Gemma's are initialised to 0)."""
  model = DecoderOnly.init_random(config, seed)
  leaves, treedef = jax.tree_util.tree_flatten_with_path(model.params)
  keys = jax.random.split(jax.random.key(seed + 1), len(leaves))
  noisy = [
    leaf + 0.3 * jax.random.normal(key, leaf.shape) if path[-1].key == "scale" else leaf
    for (path, leaf), key in zip(leaves, keys, strict=True)
  ]
  return model.replace(params=jax.tree_util.tree_unflatten(treedef, noisy))


def _reference_logits(model: DecoderOnly, tokens: np.ndarray) -> np.ndarray:
  """A plain numpy Gemma 3 forward over one sequence tokens int[length] -> [length, vocab]
  (written from transformers' modeling_gemma3: the definition the model must meet)."""
  c, p = model.config, jax.tree_util.tree_map(np.asarray, model.params)

  def rms(x, scale):
    x = x / np.sqrt(np.mean(x * x, -1, keepdims=True) + c.layer_norm_epsilon)
    return x * (1.0 + scale)

  def rotate(x, theta, positions):  # x [length, heads, head_dim], rotate-half
    half = c.head_dim // 2
    inverse = 1.0 / theta ** (np.arange(0, c.head_dim, 2, dtype=np.float64) / c.head_dim)
    angles = positions[:, None] * inverse  # [length, half]
    cos, sin = np.cos(angles)[:, None], np.sin(angles)[:, None]
    a, b = x[..., :half], x[..., half:]
    return np.concatenate([a * cos - b * sin, b * cos + a * sin], -1)

  def gelu(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))

  length = len(tokens)
  positions = np.arange(length, dtype=np.float64)
  g = c.gemma
  x = p["embed"]["embedding"][tokens].astype(np.float64) * np.sqrt(c.d_model)
  for i in range(c.num_layers):
    b = p[f"blocks_{i}"]
    local = i in g.local_layers
    h = rms(x, b["attention_norm"]["scale"])
    q = (h @ b["query"]["kernel"]).reshape(length, c.num_heads, c.head_dim)
    k = (h @ b["key"]["kernel"]).reshape(length, c.num_kv_heads, c.head_dim)
    v = (h @ b["value"]["kernel"]).reshape(length, c.num_kv_heads, c.head_dim)
    q, k = rms(q, b["query_norm"]["scale"]), rms(k, b["key_norm"]["scale"])
    theta = g.local_rope_theta if local else c.rope_theta
    q, k = rotate(q, theta, positions), rotate(k, theta, positions)
    group = c.num_heads // c.num_kv_heads
    k, v = np.repeat(k, group, 1), np.repeat(v, group, 1)
    scores = np.einsum("qhd,khd->hqk", q, k) * g.query_pre_attn_scalar**-0.5
    query, key = np.arange(length)[:, None], np.arange(length)[None, :]
    allowed = key <= query
    if local:
      allowed &= key > query - g.local_window
    scores = np.where(allowed[None], scores, -np.inf)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    context = np.einsum("hqk,khd->qhd", weights, v).reshape(length, -1)
    x = x + rms(context @ b["out"]["kernel"], b["post_attention_norm"]["scale"])
    h = rms(x, b["mlp_norm"]["scale"])
    mlp = (gelu(h @ b["gate"]["kernel"]) * (h @ b["up"]["kernel"])) @ b["down"]["kernel"]
    x = x + rms(mlp, b["post_mlp_norm"]["scale"])
  x = rms(x, p["final_norm"]["scale"])
  return x @ p["embed"]["embedding"].T


def test_forward_matches_the_numpy_definition():
  model = _model()
  tokens = np.array([2, 5, 9, 13, 7, 22, 31, 4, 8, 19], np.int32)
  got = model.forward(jnp.asarray(tokens)[None])[0]
  np.testing.assert_allclose(got, _reference_logits(model, tokens), atol=2e-4, rtol=1e-4)


def test_window_and_local_rope_matter():
  """The window is smaller than the context: a wider window changes the scores past it
  (and none within it), and so does the global rotary base in the local layers."""
  model = _model()
  tokens = jnp.array([[2, 5, 9, 13, 7, 22, 31, 4]], jnp.int32)
  logits = model.forward(tokens)
  wide = model.replace(config=_with(local_window=100)).forward(tokens)
  np.testing.assert_allclose(wide[:, :3], logits[:, :3], atol=1e-5, rtol=1e-5)
  assert float(jnp.max(jnp.abs(wide[:, 3:] - logits[:, 3:]))) > 1e-3
  same_base = model.replace(config=_with(local_rope_theta=None)).forward(tokens)
  assert float(jnp.max(jnp.abs(same_base[:, 1:] - logits[:, 1:]))) > 1e-3


def test_one_extend_equals_token_by_token_steps_and_rewinds_continue():
  model = _model()
  prompts = jnp.array([[2, 5, 9, 13, 7], [2, 11, 3, 0, 0]], jnp.int32)
  lengths = jnp.array([5, 3], jnp.int32)
  state, pending = model.init_state(prompts, lengths, 24)
  block = jnp.concatenate([pending[:, None], jnp.array([[6, 8, 10, 12, 14, 16]] * 2)], 1)
  whole, whole_state = model.extend(state, block, jnp.array([7, 7]))
  step_state = state
  for j in range(block.shape[1]):
    step, step_state = model.extend(step_state, block[:, j : j + 1], jnp.array([1, 1]))
    np.testing.assert_allclose(whole[:, j], step[:, 0], atol=2e-5, rtol=1e-5)
  # A rejected tail: rewind 4 of the 7 and go on; equal to extending only the kept 3.
  kept_end = state.end_index + 3
  after = jnp.array([[20, 21, 22, 23]] * 2, jnp.int32)
  rewound, _ = model.extend(model.rewind(whole_state, kept_end), after, jnp.array([4, 4]))
  _, kept_state = model.extend(state, block[:, :3], jnp.array([3, 3]))
  direct, _ = model.extend(kept_state, after, jnp.array([4, 4]))
  np.testing.assert_allclose(rewound, direct, atol=2e-5, rtol=1e-5)
  # And the sequence scored whole in one pass (prompt 0 has no padding).
  sequence = jnp.concatenate([prompts[:1, :4], block[:1, :3], after[:1]], 1)
  np.testing.assert_allclose(model.forward(sequence)[0, -4:], direct[0], atol=2e-4, rtol=1e-4)


def _tree_case(model, layout):
  prompts = jnp.array([[5, 6, 7, 8, 9, 10], [9, 10, 11, 0, 0, 0]], jnp.int32)
  lengths = jnp.array([6, 3], jnp.int32)
  state, pending = model.init_state(prompts, lengths, 24)
  chains = jnp.array([[[11, 12, 13, 14], [15, 16, 17, 18]], [[19, 20, 21, 22], [23, 24, 25, 26]]])
  following = jnp.array([[30, 31, 32], [33, 34, 35]], jnp.int32)
  assert_tree_chains_score_like_plain_calls(
    model, state, pending, chains, layout, jnp.array([4, 3]), following
  )


@pytest.mark.parametrize("window", [2, 3, 100])
def test_each_chain_of_a_tree_call_scores_like_a_plain_call(window):
  """Chains 4 deep with windows of 2 and 3: the tree slots' window is by depth."""
  config = _with(local_window=window)
  _tree_case(_model(config), TreeLayout.chains(2, 4, root=True))


def test_row_trees_score_each_chain_like_a_plain_call():
  """Each row's own layout (core.dynamic_tree.RowTrees) with the same two chains."""
  layout = TreeLayout.chains(2, 4, root=True)
  parents = jnp.broadcast_to(jnp.asarray(layout.parents, jnp.int32), (2, layout.size))
  rows = RowTrees.from_parents(parents, 4)
  _tree_case(_model(_with(local_window=2)), rows)


def test_gemma_layers_never_take_the_fused_layer_kernel(monkeypatch):
  """Even where the fused 8-bit decoder-layer kernel would apply, Gemma layers run the
  generic path (their norms, activation and scales are not the kernel's)."""
  monkeypatch.setattr(decoder_layer, "applies", lambda config, params: True)
  calls = []
  monkeypatch.setattr(decoder_layer, "int8_qkv", lambda *a, **k: calls.append(a))
  model = _model()
  model.forward(jnp.array([[2, 5, 9]], jnp.int32))
  assert not calls
  assert not GEMMA.llama_layers and DecoderOnlyConfig().llama_layers


def test_config_checks():
  with pytest.raises(ValueError, match="local_window"):
    GemmaLayers(local_layers=(0,))
  with pytest.raises(ValueError, match="outside"):
    DecoderOnlyConfig(num_layers=2, gemma=GemmaLayers(local_layers=(2,), local_window=4))
  assert GEMMA.attention_scale == 24.0**-0.5
  assert DecoderOnlyConfig(head_dim=64, gemma=GemmaLayers()).attention_scale == 64**-0.5
  assert DecoderOnlyConfig(head_dim=64).attention_scale == 64**-0.5
  assert GEMMA.local_layers == (0, 1, 3) and DecoderOnlyConfig().local_layers == ()
  assert [GEMMA.is_local(i) for i in range(4)] == [True, True, False, True]


def test_a_gemma_config_has_no_llama_config_json():
  """Written as a Llama config.json it would load as a different model: refused."""
  from specsample.checkpoints.decoder_only import hf_config_of

  with pytest.raises(ValueError, match="Gemma"):
    hf_config_of(GEMMA)
  assert hf_config_of(GEMMA.replace(gemma=None))["model_type"] == "llama"


def test_a_transformers_gemma3_directory_loads_with_its_logits(tmp_path):
  """A random tiny `Gemma3ForCausalLM` saved by transformers (config.json + safetensors)
  loads through `load_model` and scores as transformers does (window 4 < 12 tokens)."""
  torch = pytest.importorskip("torch")
  transformers = pytest.importorskip("transformers")
  from specsample import load_model

  config = transformers.Gemma3TextConfig(
    vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
    num_attention_heads=4, num_key_value_heads=2, head_dim=16, sliding_window=4,
    layer_types=["sliding_attention", "full_attention", "sliding_attention"],
    query_pre_attn_scalar=20, max_position_embeddings=64,
  )  # fmt: skip
  torch.manual_seed(0)
  reference = transformers.Gemma3ForCausalLM(config).eval()
  with torch.no_grad():  # the norms' scales are zero-initialised: make them matter
    for name, parameter in reference.named_parameters():
      if "norm" in name:
        parameter.normal_(0.0, 0.3)
  reference.save_pretrained(tmp_path)
  model = load_model(tmp_path)
  c = model.config
  assert c.gemma == GemmaLayers(
    query_pre_attn_scalar=20.0, local_layers=(0, 2), local_window=4, local_rope_theta=10_000.0
  )
  tokens = [[2, 17, 33, 5, 91, 60, 8, 44, 12, 71, 3, 29]]
  with torch.no_grad():
    want = reference(torch.tensor(tokens)).logits.numpy()
  got = np.asarray(model.forward(jnp.asarray(tokens, jnp.int32)))
  np.testing.assert_allclose(got, want, atol=1e-4, rtol=1e-4)
