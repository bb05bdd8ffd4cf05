"""Training T5 models with optax: cross-entropy on data, and on-policy distillation.

Two losses over padded int32 batches (`inputs [batch, input_length]`, `targets [batch,
target_length]`, 0 = padding, targets end with EOS):

- `cross_entropy`: teacher forcing on the data;
- `forward_kl`: DistillSpec-style distillation of a draft from a target: KL(target ||
  draft) per token, on sequences the draft itself sampled (on-policy), so the draft learns
  to agree with the target where the draft actually goes during speculative decoding.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax

from specsample.models.t5 import T5, T5Config
from specsample.models.t5.network import T5Network
from specsample.train.optim import make_optimizer


def pad_batch(sequences: Sequence[Sequence[int]], length: int) -> np.ndarray:
  """Right-pads (and truncates, keeping a final EOS if there was one) to int32[n, length]."""
  out = np.zeros((len(sequences), length), np.int32)
  for i, sequence in enumerate(sequences):
    sequence = list(sequence)
    if len(sequence) > length:
      sequence = sequence[: length - 1] + [sequence[-1]]
    out[i, : len(sequence)] = sequence
  return out


def shift_right(targets: jax.Array, start_id: int = 0) -> jax.Array:
  """Decoder inputs for teacher forcing: [start, t_1 .. t_{n-1}].  [batch, length]."""
  return jnp.pad(targets[:, :-1], ((0, 0), (1, 0)), constant_values=start_id)


def _logits(config: T5Config, params, inputs: jax.Array, targets: jax.Array) -> jax.Array:
  return T5Network(config).apply({"params": params}, inputs, shift_right(targets))


def cross_entropy(config: T5Config, params, inputs, targets) -> jax.Array:
  """Mean token cross-entropy over non-padding target positions."""
  logits = _logits(config, params, inputs, targets)  # [batch, length, vocab]
  losses = optax.softmax_cross_entropy_with_integer_labels(logits, targets)
  mask = (targets > 0).astype(jnp.float32)
  return jnp.sum(losses * mask) / jnp.maximum(jnp.sum(mask), 1.0)


def forward_kl(
  config: T5Config, params, teacher: T5, inputs, targets, temperature: float = 1.0
) -> jax.Array:
  """Mean per-token KL(teacher || student) over non-padding positions of `targets`."""
  student = jax.nn.log_softmax(_logits(config, params, inputs, targets) / temperature)
  teacher_logits = jax.lax.stop_gradient(_logits(teacher.config, teacher.params, inputs, targets))
  teacher_log_probs = jax.nn.log_softmax(teacher_logits / temperature)
  kl = jnp.sum(jnp.exp(teacher_log_probs) * (teacher_log_probs - student), axis=-1)
  mask = (targets > 0).astype(jnp.float32)
  return jnp.sum(kl * mask) / jnp.maximum(jnp.sum(mask), 1.0)


@dataclasses.dataclass(frozen=True)
class TrainSettings:
  steps: int = 3000
  batch_size: int = 64
  learning_rate: float = 2e-3
  warmup_steps: int = 200
  weight_decay: float = 0.01
  max_seconds: float | None = None  # stop early when the wall-clock budget is spent
  log_every: int = 100
  seed: int = 0
  final_fraction: float = 0.0  # the learning rate's cosine decays to this share of it


def trim(batch: np.ndarray, multiple: int = 8) -> np.ndarray:
  """Drops all-padding columns at the end, keeping a width that is a multiple of `multiple`.

  Few distinct widths means few compilations; short batches cost less than full width.
  """
  used = int(np.max(np.nonzero(batch.any(axis=0))[0], initial=-1)) + 1
  return batch[:, : min(batch.shape[1], max(multiple, -(-used // multiple) * multiple))]


def batches(
  inputs: np.ndarray, targets: np.ndarray, batch_size: int, seed: int, pool: int = 50
) -> Iterator:
  """Endless shuffled minibatches of similar lengths, each trimmed to its longest row.

  Each epoch is shuffled, cut into pools of `pool` batches, each pool sorted by length and
  cut into batches, and the batches shuffled again: little padding, random order.
  """
  rng = np.random.default_rng(seed)
  lengths = (inputs > 0).sum(1) + (targets > 0).sum(1)
  while True:
    order = rng.permutation(len(inputs))
    groups = []
    for start in range(0, len(order), pool * batch_size):
      chunk = order[start : start + pool * batch_size]
      chunk = chunk[np.argsort(lengths[chunk], kind="stable")]
      groups += [
        chunk[i : i + batch_size] for i in range(0, len(chunk) - batch_size + 1, batch_size)
      ]
    for number in rng.permutation(len(groups)):
      index = groups[number]
      yield trim(inputs[index]), trim(targets[index])


def train(
  model: T5,
  loss: Callable,
  next_batch: Callable[[T5], tuple[np.ndarray, np.ndarray]],
  settings: TrainSettings,
  *,
  progress: Callable[[int, float], None] | None = None,
) -> tuple[T5, list[tuple[int, float]]]:
  """Runs `settings.steps` optax steps of `loss(config, params, inputs, targets)`.

  `next_batch(current_model)` gives each step's (inputs, targets); it sees the model being
  trained so that on-policy data can be drawn from it. Returns the trained model and the
  (step, mean loss) log; `progress(step, loss)` is called every `log_every` steps.
  """
  config = model.config
  optimizer = make_optimizer(settings)

  @jax.jit
  def step(params, opt_state, inputs, targets):
    value, grads = jax.value_and_grad(lambda p: loss(config, p, inputs, targets))(params)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, value

  params, opt_state = model.params, optimizer.init(model.params)
  log, window = [], []
  start = time.perf_counter()
  for number in range(1, settings.steps + 1):
    inputs, targets = next_batch(T5(params=params, config=config))
    params, opt_state, value = step(params, opt_state, jnp.asarray(inputs), jnp.asarray(targets))
    window.append(value)
    if number % settings.log_every == 0 or number == settings.steps:
      mean = float(np.mean(jax.device_get(window)))
      log.append((number, mean))
      window = []
      if progress:
        progress(number, mean)
    if settings.max_seconds and time.perf_counter() - start > settings.max_seconds:
      break
  return T5(params=params, config=config), log
