"""Shared fixtures: counting XLA compilations; TensorFlow-using modules run apart."""

from __future__ import annotations

import contextlib
import gc
import os

import jax
import pytest

from specsample.kernels import native

# Modules that run TensorFlow data pipelines (seqio / TFDS) in-process. With TensorFlow
# loaded into the one long pytest process, later XLA compilations crashed it (SIGSEGV /
# SIGABRT inside backend_compile_and_load, reproducibly at the same test); so the main
# session skips collecting them and tests/test_tensorflow_isolated.py runs them in a
# pytest process of their own. The same crash came back later without TensorFlow, and
# its cause was then found: the process ran out of memory mappings (vm.max_map_count),
# which compiled programs hold on CPU; `release_compiled_programs` below prevents it.
# TensorFlow (its own compiler and thread pools) still runs apart.
TENSORFLOW_MODULES = ("test_tasks.py", "test_eval_run.py")
TENSORFLOW_SESSION = "SPECSAMPLE_TENSORFLOW_SESSION"
if not os.environ.get(TENSORFLOW_SESSION):
  collect_ignore = list(TENSORFLOW_MODULES)

BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"


@pytest.fixture(autouse=True)
def step_cost_cache(tmp_path_factory, monkeypatch):
  """gamma="auto" keeps measured step costs in the user's cache directory: in tests, a
  directory of the test's own (subprocesses inherit it), never the home directory."""
  directory = tmp_path_factory.mktemp("step_costs")
  monkeypatch.setenv("SPECSAMPLE_CACHE_DIR", str(directory))
  return directory


@pytest.fixture(autouse=True, scope="module")
def release_compiled_programs():
  """Drops every compiled program after each test module. On CPU each program's machine
  code holds ~1,000 memory mappings; the whole suite in one process compiles enough of
  them to pass vm.max_map_count (65,530), and XLA then crashes the process (SIGSEGV in
  backend_compile_and_load) at whichever test compiles next."""
  yield
  jax.clear_caches()
  gc.collect()


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


def _instruction_sets(names):
  return [
    pytest.param(
      name,
      marks=pytest.mark.skipif(
        name not in native.supported_instruction_sets(), reason=f"CPU lacks {name}"
      ),
    )
    for name in names
  ]


def _running(name: str):
  """The kernels of instruction set `name` while the test runs, then the process's own."""
  with pytest.MonkeyPatch.context() as patch:
    patch.setenv(native.ISA_VARIABLE, name)
    native.choose_again()
    assert native.instruction_set() == name, native.why_not_available()
    yield name
  native.choose_again()
  native.kernel_available()


@pytest.fixture(params=_instruction_sets(("avx512f", "avx2")))
def isa(request):
  """Runs a test with each instruction set's small-k kernels (those the CPU lacks skip),
  then gives the process its own choice back."""
  yield from _running(request.param)


@pytest.fixture(params=_instruction_sets(("avx512f", "avxvnni", "avx2")))
def integer_isa(request):
  """Runs a test with each instruction set of the 8-bit-activation kernels (AVX-512 VNNI,
  AVX-VNNI, AVX2's vpmaddubsw; those the CPU lacks skip), then gives the process its own
  choice back."""
  yield from _running(request.param)
