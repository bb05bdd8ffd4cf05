"""Runs the TensorFlow-using test modules (conftest.TENSORFLOW_MODULES) in their own
pytest process, so TensorFlow never shares a process with the rest of the suite."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest
from conftest import TENSORFLOW_MODULES, TENSORFLOW_SESSION

TESTS = pathlib.Path(__file__).resolve().parent


@pytest.mark.slow
def test_tensorflow_modules_pass_in_their_own_process():
  pytest.importorskip("seqio", reason="the eval extra (seqio, TFDS) is installed in CI")
  result = subprocess.run(
    [sys.executable, "-m", "pytest", "-q", "-rs", *(str(TESTS / m) for m in TENSORFLOW_MODULES)],
    env={**os.environ, TENSORFLOW_SESSION: "1"},
    cwd=TESTS.parent,
    capture_output=True,
    text=True,
  )
  summary = result.stdout[-4000:] + result.stderr[-2000:]
  print(summary)
  assert result.returncode == 0, summary
  assert " passed" in result.stdout and " skipped" not in result.stdout, summary
