"""Sharded decoding on 8 simulated CPU devices equals unsharded decoding.

The device count must be set before jax starts, so tests/sharding_check.py runs in a
process of its own and reports what it saw as JSON.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).parent


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> dict:
  path = tmp_path_factory.mktemp("sharding") / "report.json"
  env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=8"}
  result = subprocess.run(
    [sys.executable, str(HERE / "sharding_check.py"), str(path)],
    cwd=HERE,
    env=env,
    capture_output=True,
    text=True,
    timeout=1200,
  )
  assert result.returncode == 0, result.stderr[-3000:]
  return json.loads(path.read_text())


pytestmark = pytest.mark.slow


def test_eight_devices(report):
  assert report["device_count"] == 8
  assert [m["mesh"] for m in report["meshes"]] == [
    {"data": 8, "model": 1}, {"data": 1, "model": 8}, {"data": 2, "model": 4}
  ]  # fmt: skip


@pytest.mark.parametrize("index", [0, 1, 2])
def test_sharded_outputs_equal_unsharded_outputs(report, index):
  entry = report["meshes"][index]
  # Greedy, speculative and plain, on every mesh; sampled (same seed) too on the mesh
  # that shards both axes; T5 and decoder-only pairs.
  decodes = {"spec_greedy", "plain_greedy"}
  if min(entry["mesh"].values()) > 1:
    decodes |= {"spec_sampled", "plain_sampled"}
  assert entry["t5_equal"] == dict.fromkeys(decodes, True)
  assert entry["decoder_only_equal"] == dict.fromkeys(decodes, True)
  assert entry["t5_spec_equals_plain"]


def test_parameter_and_cache_shardings_follow_the_rules(report):
  by_mesh = {(m["mesh"]["data"], m["mesh"]["model"]): m for m in report["meshes"]}
  data_only, model_only, both = by_mesh[8, 1], by_mesh[1, 8], by_mesh[2, 4]
  for entry in (model_only, both):
    assert entry["params"] == {
      "embedding": "('model', None)",
      "query": "(None, 'model')",
      "out": "('model', None)",
      "wi_0": "(None, 'model')",
      "wo": "('model', None)",
      "logits_dense": "(None, 'model')",
      "norm": "(None,)",
      "draft_wi": "(None, None)",  # the draft is replicated over the model axis
    }
  assert set(data_only["params"].values()) <= {"(None, None)", "(None,)"}
  assert data_only["caches"]["self_keys"] == "('data', None, None, None)"
  assert model_only["caches"]["self_keys"] == "(None, None, 'model', None)"
  assert both["caches"] == {
    "self_keys": "('data', None, 'model', None)",
    "cross_values": "('data', None, 'model', None)",
    "draft_self_keys": "('data', None, None, None)",
  }
  # Each device holds a 1/model slice of a model-parallel kernel, never the whole of it.
  assert both["wi_0_shard_shape"] == [both["wi_0_shape"][0], both["wi_0_shape"][1] // 4]
  assert model_only["wi_0_shard_shape"] == [
    model_only["wi_0_shape"][0],
    model_only["wi_0_shape"][1] // 8,
  ]


def test_two_processes_feed_their_rows_and_match_a_local_decode(tmp_path):
  """jax.distributed over two CPU processes (gloo): the multi-host path, for real."""
  import socket

  with socket.socket() as s:
    s.bind(("localhost", 0))
    port = str(s.getsockname()[1])
  runs = [
    subprocess.Popen(
      [
        sys.executable,
        str(HERE / "multiprocess_check.py"),
        port,
        str(i),
        str(tmp_path / f"{i}.json"),
      ],
      cwd=HERE,
      stdout=subprocess.PIPE,
      stderr=subprocess.STDOUT,
      text=True,
    )
    for i in range(2)
  ]
  for run in runs:
    output, _ = run.communicate(timeout=600)
    assert run.returncode == 0, output[-3000:]
  for i in range(2):
    report = json.loads((tmp_path / f"{i}.json").read_text())
    assert report["process_count"] == 2 and report["global_devices"] == 4
    assert report["local_devices"] == 2 and not report["fully_addressable"]
    assert report["rows"] == 6  # 5 prompts padded to a multiple of data=2
    assert report["equal"]  # gathered greedy output == the unsharded local decode
