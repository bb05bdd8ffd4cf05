"""Shared fixtures: counting XLA compilations; TensorFlow-using modules run apart."""

from __future__ import annotations

import contextlib
import os

import jax
import pytest

# Modules that run TensorFlow data pipelines (seqio / TFDS) in-process. With TensorFlow
# loaded into the one long pytest process, later XLA compilations crashed it (SIGSEGV /
# SIGABRT inside backend_compile_and_load, reproducibly at the same test); so the main
# session skips collecting them and tests/test_tensorflow_isolated.py runs them in a
# pytest process of their own.
TENSORFLOW_MODULES = ("test_tasks.py", "test_eval_run.py")
TENSORFLOW_SESSION = "SPECSAMPLE_TENSORFLOW_SESSION"
if not os.environ.get(TENSORFLOW_SESSION):
  collect_ignore = list(TENSORFLOW_MODULES)

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
