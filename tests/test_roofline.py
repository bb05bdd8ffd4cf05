"""Weight traffic per call (`weights_per_call`), the roofline floors, and `bench`'s report of
them, on tiny models whose weights are counted by hand."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from tiny_models import tiny_config

from specsample.bench import output, roofline
from specsample.bench.pair import bench_pair
from specsample.bench.pair_report import BenchSettings
from specsample.kernels import blocks
from specsample.models import MarkovLM
from specsample.models.decoder_only import DecoderOnly, DecoderOnlyConfig
from specsample.models.lookup_draft import LookupThenModel
from specsample.models.ngram import NGramDraft
from specsample.models.t5 import T5
from specsample.models.weights import with_weight_dtype

TINY = DecoderOnlyConfig(
  vocab_size=64, d_model=32, num_heads=4, num_kv_heads=2, head_dim=8, mlp_dim=48,
  num_layers=2, eos_id=1, pad_id=0, tie_word_embeddings=True,
)  # fmt: skip
# Per layer: query + out 32 x 32 each, key + value 32 x 16 each, gate/up/down 32 x 48 each.
LAYER = 2 * 32 * 32 + 2 * 32 * 16 + 3 * 32 * 48
ROOFS = roofline.Roofs(bandwidth=1e9, arithmetic=1e10)


def test_a_decoder_reads_its_layers_and_output_layer_not_its_gathered_embedding():
  tied = DecoderOnly.init_random(TINY)
  assert tied.weights_per_call() == (2 * LAYER + 64 * 32, 4 * (2 * LAYER + 64 * 32))
  untied = DecoderOnly.init_random(dataclasses.replace(TINY, tie_word_embeddings=False))
  assert untied.weights_per_call() == (2 * LAYER + 32 * 64, 4 * (2 * LAYER + 32 * 64))
  reduced = DecoderOnly.init_random(
    dataclasses.replace(TINY, tie_word_embeddings=False, output_vocab_size=16)
  )
  assert reduced.weights_per_call()[0] == 2 * LAYER + 32 * 16  # output_ids are not weights
  half = with_weight_dtype(reduced, "bfloat16")
  assert half.weights_per_call() == (2 * LAYER + 32 * 16, 2 * (2 * LAYER + 32 * 16))
  # Draft wrappers: the lookup reads nothing, the model behind it its own weights.
  assert NGramDraft.for_target(tied).weights_per_call() == (0, 0)
  behind = LookupThenModel.for_target(reduced, tied)
  assert behind.weights_per_call() == reduced.weights_per_call()
  assert roofline.has_weights_per_call(behind) and roofline.has_weights_per_call(tied)
  toy = MarkovLM.random(0, 64)  # no weights_per_call, nor a lookup in front of it
  assert not roofline.has_weights_per_call(toy)
  assert not roofline.has_weights_per_call(LookupThenModel.for_target(toy, tied))


def test_block_matrices_count_their_weights_and_their_stored_bytes():
  model = DecoderOnly.init_random(TINY)
  table = model.params["embed"]["embedding"]  # [64, 32] -> one Q8_0 block (34 bytes) per row
  raw = np.zeros((64, 34), np.uint8)
  params = {**model.params, "embed": {"embedding": blocks.from_numpy(raw, "q8_0")}}
  count, nbytes = model.replace(params=params).weights_per_call()
  assert count == 2 * LAYER + table.size
  assert nbytes == 4 * 2 * LAYER + 64 * 34


def test_a_t5_decoder_call_reads_neither_the_encoder_nor_the_cross_keys_values():
  config = tiny_config("t5.1.1")  # untied: its own output layer
  model = T5.init_random(config)
  d, h, f, v = config.d_model, config.num_heads * config.head_dim, config.mlp_dim, config.vocab_size
  mlp_in = len(config.mlp_activations) * d * f
  per_layer = 4 * d * h + 2 * d * h + mlp_in + f * d  # self q/k/v/out, cross q/out, MLP
  expected = config.num_decoder_layers * per_layer + d * v
  assert model.weights_per_call()[0] == expected
  tied = T5.init_random(tiny_config("t5.1.0"))
  c0 = tied.config
  d0, h0, f0 = c0.d_model, c0.num_heads * c0.head_dim, c0.mlp_dim
  per_layer0 = 6 * d0 * h0 + len(c0.mlp_activations) * d0 * f0 + f0 * d0
  assert tied.weights_per_call()[0] == c0.num_decoder_layers * per_layer0 + c0.vocab_size * d0


def test_floors_and_the_verify_bound():
  model = DecoderOnly.init_random(TINY)
  count, nbytes = model.weights_per_call()
  memory, arithmetic = nbytes / ROOFS.bandwidth, 2 * count / ROOFS.arithmetic
  assert memory > arithmetic  # 4 bytes per weight at 1 GB/s vs 2 operations at 10 GFLOP/s
  assert roofline.call_floor(count, nbytes, 1, ROOFS) == pytest.approx(memory)
  # Memory-bound up to k = 20 rows (4 / 1e9 = 2 k / 1e10), then linear in k.
  floors = roofline.call_floors(model, [1, 8, 40], ROOFS)
  assert floors[8] == pytest.approx(memory) and floors[40] == pytest.approx(2 * memory)

  draft = DecoderOnly.init_random(dataclasses.replace(TINY, num_layers=1))
  draft_count, draft_bytes = draft.weights_per_call()
  plain = roofline.decoder_roofline("autoregressive", 0.0, 2 * memory, model, roofs=ROOFS)
  assert plain.bytes_per_token == nbytes and plain.memory_fraction == pytest.approx(0.5)
  spec = roofline.decoder_roofline(
    "speculative", 0.0, memory, model, draft, gamma=3, tokens_per_target_call=2.0, roofs=ROOFS
  )
  assert spec.bytes_per_token == pytest.approx((nbytes + 3 * draft_bytes) / 2)
  assert spec.operations_per_token == pytest.approx(2 * (4 * count + 3 * draft_count) / 2)
  assert spec.arithmetic_fraction == pytest.approx(spec.operations_per_token / 1e10 / memory)


def test_measured_roofs_are_plausible():
  roofs = roofline.measure_roofs(megabytes=64, size=512, repeats=3)
  assert 1e8 < roofs.bandwidth < 1e13 and 1e8 < roofs.arithmetic < 1e15


def test_two_activation_passes_halve_the_integer_roof(monkeypatch):
  monkeypatch.setattr(roofline, "_int8_arithmetic", lambda repeats: 4e11)
  one = roofline.measure_roofs(megabytes=8, size=128, repeats=1, activations="int8")
  two = roofline.measure_roofs(megabytes=8, size=128, repeats=1, activations="int8x2")
  assert (one.arithmetic_kind, two.arithmetic_kind) == ("int8", "int8x2")
  assert one.arithmetic == 4e11 and two.arithmetic == 2e11


def test_bench_reports_rooflines_for_models_that_count_their_weights(tmp_path):
  target = DecoderOnly.init_random(TINY, seed=0)
  draft = DecoderOnly.init_random(dataclasses.replace(TINY, num_layers=1), seed=1)
  settings = BenchSettings(
    gammas=(1, 2), shapes=("token",), temperatures=(0.0,), batch_sizes=(1,), max_new_tokens=6,
    repeats=1, cost_repeats=2, phase_prompts=1,
  )  # fmt: skip
  report = bench_pair(target, draft, [[3, 4, 5], [6, 7]], settings)
  assert report.roofs is not None and sorted(report.call_floors) == [1, 2, 3]
  assert report.call_floors[1] == pytest.approx(
    roofline.call_floor(*target.weights_per_call(), 1, report.roofs)
  )
  plain, spec = report.rooflines
  count, nbytes = target.weights_per_call()
  assert plain.decoder == "autoregressive" and plain.bytes_per_token == nbytes
  assert plain.seconds_per_token == pytest.approx(
    report.autoregressive_seconds[0.0] / report.autoregressive_tokens[0.0]
  )
  best = report.best(0.0)
  assert spec.decoder == f"speculative (gamma {best.gamma}, token)"
  assert spec.seconds_per_token == pytest.approx(best.speculative_seconds / best.new_tokens)
  assert spec.bytes_per_token == pytest.approx(
    (nbytes + best.gamma * draft.weights_per_call()[1]) / best.tokens_per_target_call
  )
  text = output.markdown(report)
  assert "Rooflines" in text and "r(k) at the floors" in text
  data = output.report_dict(report)
  assert data["rooflines"][0]["bytes_per_token"] == nbytes and data["roofs"]["bandwidth"] > 0
