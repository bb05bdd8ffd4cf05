"""Training helpers: batching, losses, and that a few optax steps learn something."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from tiny_models import tiny_config

from specsample.models.t5 import T5
from specsample.train.seq2seq import (
  TrainSettings,
  batches,
  cross_entropy,
  forward_kl,
  pad_batch,
  shift_right,
  train,
  trim,
)


def test_padding_trimming_and_shifting():
  padded = pad_batch([[5, 6, 1], [7, 1], list(range(2, 14)) + [1]], 10)
  assert padded.shape == (3, 10) and padded[2, -1] == 1  # truncated, EOS kept
  assert trim(padded[:2]).shape == (2, 8)  # 3 used columns -> a multiple of 8
  np.testing.assert_array_equal(shift_right(jnp.array([[5, 6, 1]])), [[0, 5, 6]])


def test_batches_cover_every_example_each_epoch_with_little_padding():
  rng = np.random.default_rng(0)
  lengths = rng.integers(1, 40, size=640)
  inputs = pad_batch([[2] * n + [1] for n in lengths], 48)
  targets = pad_batch([[3] * (n // 2 + 1) + [1] for n in lengths], 48)
  stream = batches(inputs, targets, 32, seed=0, pool=10)
  seen, widths = [], []
  for _ in range(20):  # one epoch
    batch_inputs, batch_targets = next(stream)
    seen += (batch_inputs > 0).sum(1).tolist()
    widths.append(batch_inputs.shape[1])
  assert sorted(seen) == sorted((inputs > 0).sum(1).tolist())
  assert np.mean(widths) < 40  # length-sorted pools: most batches are narrower than 48


def toy_task(count: int, seed: int = 0):
  """Copy task: the target repeats the input (tokens 2..11)."""
  rng = np.random.default_rng(seed)
  sequences = [rng.integers(2, 12, size=rng.integers(2, 6)).tolist() + [1] for _ in range(count)]
  return pad_batch(sequences, 8), pad_batch(sequences, 8)


def test_cross_entropy_training_learns_a_copy_task():
  inputs, targets = toy_task(256)
  model = T5.init_random(tiny_config(vocab=16), seed=0)
  before = float(
    cross_entropy(model.config, model.params, jnp.asarray(inputs), jnp.asarray(targets))
  )
  data = batches(inputs, targets, 32, seed=0)
  settings = TrainSettings(
    steps=150, batch_size=32, learning_rate=3e-3, warmup_steps=10, log_every=50
  )
  trained, log = train(model, cross_entropy, lambda _: next(data), settings)
  after = float(
    cross_entropy(trained.config, trained.params, jnp.asarray(inputs), jnp.asarray(targets))
  )
  assert [step for step, _ in log] == [50, 100, 150]
  assert after < 0.5 * before


def test_forward_kl_is_zero_for_the_teacher_itself_and_positive_otherwise():
  inputs, targets = toy_task(16)
  teacher = T5.init_random(tiny_config(vocab=16), seed=0)
  other = T5.init_random(tiny_config(vocab=16), seed=1)
  same = forward_kl(
    teacher.config, teacher.params, teacher, jnp.asarray(inputs), jnp.asarray(targets)
  )
  assert float(same) == pytest.approx(0.0, abs=1e-5)
  differ = forward_kl(
    other.config, other.params, teacher, jnp.asarray(inputs), jnp.asarray(targets)
  )
  assert float(differ) > 0.01
