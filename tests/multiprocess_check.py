"""One of two processes of a multi-process CPU run (tests/test_sharding.py):

  python tests/multiprocess_check.py PORT PROCESS_ID OUT.json

Each process has 2 CPU devices; jax.distributed joins them into 4 global devices, a
(data=2, model=2) mesh spans both processes, each process feeds only its shards' prompt
rows, and the gathered greedy output is compared with an unsharded local decode.
"""

from __future__ import annotations

import json
import os
import sys

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"

import jax  # noqa: E402

jax.config.update("jax_cpu_collectives_implementation", "gloo")


def main(port: str, process_id: str, path: str) -> None:
  jax.distributed.initialize(
    coordinator_address=f"localhost:{port}", num_processes=2, process_id=int(process_id)
  )
  from tiny_models import tiny_config

  from specsample import SamplingConfig, speculative_generate
  from specsample.models import T5
  from specsample.scaling.shard import global_prompts, make_mesh, shard_model

  prompts = [[5, 9, 3, 7], [7, 2], [2, 4, 6, 8, 10, 12], [11], [3, 3, 3]]
  target = T5.init_random(tiny_config(vocab=64, d_model=32, num_heads=4, mlp_dim=64), seed=0)
  draft = T5.init_random(tiny_config("t5.1.0", vocab=64, d_model=16, mlp_dim=32), seed=1)
  greedy = SamplingConfig(0.0)
  local = speculative_generate(
    target, draft, prompts, gamma=3, max_new_tokens=10, sampling=greedy
  ).sequences()
  mesh = make_mesh({"data": 2, "model": 2})
  padded, lengths, real = global_prompts(prompts, mesh)
  out = speculative_generate(
    shard_model(target, mesh), shard_model(draft, mesh), padded,
    prompt_lengths=lengths, gamma=3, max_new_tokens=10, sampling=greedy,
  )  # fmt: skip
  report = {
    "process_count": jax.process_count(),
    "global_devices": jax.device_count(),
    "local_devices": jax.local_device_count(),
    "fully_addressable": bool(padded.is_fully_addressable),
    "rows": int(padded.shape[0]),
    "equal": out.sequences()[:real] == local,
    "alpha": out.stats.alpha,
  }
  with open(path, "w") as f:
    json.dump(report, f)
  jax.distributed.shutdown()


if __name__ == "__main__":
  main(*sys.argv[1:])
