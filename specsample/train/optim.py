"""The optimizer of every training loop in specsample.train (T5 training, decoder-only and
feature-draft distillation): AdamW with global-norm clipping, linear warmup and cosine
decay; and the drafts' step loop, which logs, checkpoints and stops at a time budget."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

import jax
import jax.numpy as jnp
import numpy as np
import optax


class OptimizerSettings(Protocol):
  """What `make_optimizer` reads (TrainSettings, DistillSettings, FeatureDistillSettings)."""

  steps: int
  learning_rate: float
  warmup_steps: int
  weight_decay: float
  final_fraction: float  # the learning rate decays to final_fraction * learning_rate


def make_optimizer(settings: OptimizerSettings) -> optax.GradientTransformation:
  """AdamW (weight decay `settings.weight_decay`) on gradients clipped to global norm 1,
  its learning rate rising linearly from 0 over `warmup_steps`, then falling along a cosine
  to `final_fraction * learning_rate` at step `steps`."""
  schedule = optax.warmup_cosine_decay_schedule(
    0.0,
    settings.learning_rate,
    settings.warmup_steps,
    max(settings.steps, settings.warmup_steps + 1),  # at least one step of decay
    end_value=settings.final_fraction * settings.learning_rate,
  )
  return optax.chain(
    optax.clip_by_global_norm(1.0), optax.adamw(schedule, weight_decay=settings.weight_decay)
  )


class LoopSettings(OptimizerSettings, Protocol):
  """What `run_steps` reads besides the optimizer's settings."""

  max_seconds: float | None  # stop early when the wall-clock budget is spent
  log_every: int


def run_steps(
  step: Callable[[Any, Any, Any, int], tuple[Any, Any, jax.Array]],
  trainable,
  opt_state,
  next_batch: Callable[[], Any],
  settings: LoopSettings,
  *,
  start_step: int,
  progress: Callable[[int, float], None] | None,
  checkpoint: Callable[[Any, Any, int], None] | None,
  checkpoint_every: int,
) -> tuple[Any, Any, list[tuple[int, float]]]:
  """Steps start_step + 1 .. settings.steps: `step(trainable, opt_state, batch, number)`
  -> (trainable, opt_state, loss) on each `next_batch()`. Logs the mean loss every
  `log_every` steps (`progress(number, mean)`), calls `checkpoint(trainable, opt_state,
  number)` every `checkpoint_every` steps, and at the last step or when `max_seconds` is
  spent (then it stops). Returns (trainable, opt_state, the (step, mean loss) log)."""
  log, window, begin = [], [], time.perf_counter()
  for number in range(start_step + 1, settings.steps + 1):
    batch = jax.tree_util.tree_map(jnp.asarray, next_batch())
    trainable, opt_state, value = step(trainable, opt_state, batch, number)
    window.append(value)
    last = number == settings.steps
    out_of_time = settings.max_seconds and time.perf_counter() - begin > settings.max_seconds
    if number % settings.log_every == 0 or last or out_of_time:
      mean = float(np.mean(jax.device_get(window)))
      log.append((number, mean))
      window = []
      if progress:
        progress(number, mean)
    if checkpoint and (number % checkpoint_every == 0 or last or out_of_time):
      checkpoint(trainable, opt_state, number)
    if out_of_time:
      break
  return trainable, opt_state, log
