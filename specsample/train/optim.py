"""The optimizer of every training loop in specsample.train (T5 training, decoder-only and
feature-draft distillation): AdamW with global-norm clipping, linear warmup and cosine
decay."""

from __future__ import annotations

from typing import Protocol

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
