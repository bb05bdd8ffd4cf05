"""Run in a process of its own with 8 simulated CPU devices (tests/test_sharding.py):

  XLA_FLAGS=--xla_force_host_platform_device_count=8 python tests/sharding_check.py OUT.json

Decodes with sharded and unsharded T5 (and decoder-only) pairs on several meshes and
writes what it saw: token equality and the shardings of parameters and caches.
"""

from __future__ import annotations

import json
import sys

import jax
import jax.numpy as jnp
import numpy as np
from tiny_models import tiny_config

from specsample import SamplingConfig, generate, speculative_generate
from specsample.models import T5, DecoderOnly, DecoderOnlyConfig
from specsample.scaling.shard import make_mesh, shard_batch, shard_model

MESHES = [{"data": 8, "model": 1}, {"data": 1, "model": 8}, {"data": 2, "model": 4}]
PROMPTS = [
  [5, 9, 3, 7],
  [7, 2],
  [2, 4, 6, 8, 10, 12],
  [11],
  [3, 3, 3],
  [9, 8, 7, 6, 5],
  [4],
  [6, 2],
]


def spec_str(array) -> str:
  """The array's PartitionSpec with one entry per dimension (jax drops trailing Nones)."""
  spec = tuple(array.sharding.spec)
  return str(spec + (None,) * (array.ndim - len(spec)))


@jax.jit
def _init(model, prompts, lengths):
  return model.init_state(prompts, lengths, 16)[0]


def decode_all(target, draft, with_sampling: bool = True) -> dict[str, np.ndarray]:
  """Greedy decodes, and with_sampling sampled ones (same seed), speculative and plain."""
  greedy, sampled = SamplingConfig(0.0), SamplingConfig(1.0, top_k=20)
  out = {
    "spec_greedy": speculative_generate(
      target, draft, PROMPTS, gamma=3, max_new_tokens=12, sampling=greedy
    ),  # fmt: skip
    "plain_greedy": generate(target, PROMPTS, max_new_tokens=12, sampling=greedy),
  }
  if with_sampling:
    out["spec_sampled"] = speculative_generate(
      target, draft, PROMPTS, gamma=3, max_new_tokens=12, sampling=sampled, seed=7
    )
    out["plain_sampled"] = generate(target, PROMPTS, max_new_tokens=12, sampling=sampled, seed=7)
  return {name: np.asarray(o.tokens) for name, o in out.items()}


def main(path: str) -> None:
  assert jax.device_count() == 8, jax.devices()
  report = {"device_count": jax.device_count(), "meshes": []}
  t5_target = T5.init_random(tiny_config(vocab=64, d_model=32, num_heads=8, mlp_dim=64), seed=0)
  t5_draft = T5.init_random(tiny_config("t5.1.0", vocab=64, d_model=16, mlp_dim=32), seed=1)
  llama = DecoderOnlyConfig(vocab_size=64, d_model=32, num_heads=8, num_kv_heads=8, head_dim=4,
                            mlp_dim=64, num_layers=2, eos_id=1)  # fmt: skip
  dec_target = DecoderOnly.init_random(llama, seed=2)
  dec_draft = DecoderOnly.init_random(
    DecoderOnlyConfig(vocab_size=64, d_model=16, num_heads=2, num_kv_heads=2, head_dim=8,
                      mlp_dim=32, num_layers=1, eos_id=1), seed=3)  # fmt: skip
  reference = {
    "t5": decode_all(t5_target, t5_draft),
    "decoder_only": decode_all(dec_target, dec_draft),
  }
  for shape in MESHES:
    mesh = make_mesh(shape)
    entry = {"mesh": shape}
    target = shard_model(t5_target, mesh)
    draft = shard_model(t5_draft, mesh, model_parallel=False)
    # Sampling (random numbers drawn over sharded rows and vocabularies) on the mesh that
    # shards both axes; greedy decoding on every mesh (each decode compiles anew for 8
    # devices: the sampled ones on the one-axis meshes would add a third of this check).
    with_sampling = min(shape.values()) > 1
    got = decode_all(target, draft, with_sampling)
    entry["t5_equal"] = {k: bool(np.array_equal(got[k], reference["t5"][k])) for k in got}
    entry["t5_spec_equals_plain"] = bool(np.array_equal(got["spec_greedy"], got["plain_greedy"]))
    p = target.params
    entry["params"] = {
      "embedding": spec_str(p["token_embedder"]["embedding"]),
      "query": spec_str(p["decoder"]["layers_0"]["self_attention"]["query"]["kernel"]),
      "out": spec_str(p["decoder"]["layers_0"]["self_attention"]["out"]["kernel"]),
      "wi_0": spec_str(p["encoder"]["layers_0"]["mlp"]["wi_0"]["kernel"]),
      "wo": spec_str(p["encoder"]["layers_0"]["mlp"]["wo"]["kernel"]),
      "logits_dense": spec_str(p["decoder"]["logits_dense"]["kernel"]),
      "norm": spec_str(p["decoder"]["decoder_norm"]["scale"]),
      "draft_wi": spec_str(draft.params["encoder"]["layers_0"]["mlp"]["wi"]["kernel"]),
    }
    lengths = np.array([len(x) for x in PROMPTS], np.int32)
    padded = np.zeros((len(PROMPTS), 6), np.int32)
    for i, row in enumerate(PROMPTS):
      padded[i, : len(row)] = row
    state = _init(target, shard_batch(padded, mesh), shard_batch(lengths, mesh))
    entry["caches"] = {
      "self_keys": spec_str(state.caches[0][0]),
      "cross_values": spec_str(state.cross[1][1]),
      "draft_self_keys": spec_str(_init(draft, padded, lengths).caches[0][0]),
    }
    # The parameters are never gathered: each device holds its shard only.
    kernel = p["decoder"]["layers_0"]["mlp"]["wi_0"]["kernel"]
    entry["wi_0_shard_shape"] = list(kernel.addressable_shards[0].data.shape)
    entry["wi_0_shape"] = list(kernel.shape)
    dec = decode_all(shard_model(dec_target, mesh), shard_model(dec_draft, mesh), with_sampling)
    entry["decoder_only_equal"] = {
      k: bool(np.array_equal(dec[k], reference["decoder_only"][k])) for k in dec
    }
    report["meshes"].append(entry)
  with open(path, "w") as f:
    json.dump(report, f, indent=2)


if __name__ == "__main__":
  jnp.zeros(1)  # initialise the backend (with the device count from XLA_FLAGS)
  main(sys.argv[1])
