"""Shared fixtures: counting XLA compilations."""

from __future__ import annotations

import contextlib

import jax
import pytest

BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"


@pytest.fixture
def count_compilations():
  """Yields a context manager whose value lists the XLA compilations done inside it."""

  @contextlib.contextmanager
  def counting():
    compiled: list[float] = []

    def listener(event: str, duration: float, **kwargs) -> None:
      if event == BACKEND_COMPILE_EVENT:
        compiled.append(duration)

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
      yield compiled
    finally:
      jax.monitoring.unregister_event_duration_listener(listener)

  return counting
