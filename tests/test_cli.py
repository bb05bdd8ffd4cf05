"""The `specsample` command line."""

from __future__ import annotations

import subprocess
import sys

import pytest

from specsample.cli import main
from specsample.cli.demo import DemoSettings, run_demo


def test_demo_reports_exactness_and_acceptance(capsys):
  numbers = run_demo(DemoSettings(samples=4000, max_new_tokens=2, gamma=3))
  printed = capsys.readouterr().out
  assert "speculative == autoregressive: True" in printed
  assert numbers["greedy_equal"] == 1.0
  assert 0.3 < numbers["alpha"] < 1.0
  # Speculative samples sit at the noise level; the draft alone is far off.
  assert numbers["speculative_tv"] < 2 * numbers["noise_tv"]
  assert numbers["draft_tv"] > 5 * numbers["noise_tv"]


def test_bad_arguments_exit_with_a_message(capsys):
  assert main(["demo", "--gamma", "0", "--samples", "10"]) == 2
  assert "gamma must be >= 1" in capsys.readouterr().err
  assert main(["demo", "--temperature", "0"]) == 2
  with pytest.raises(SystemExit):
    main(["demo", "--verification", "typical"])


@pytest.mark.slow
def test_console_script_runs():
  result = subprocess.run(
    [sys.executable, "-m", "specsample.cli", "demo", "--samples", "2000"],
    capture_output=True,
    text=True,
    timeout=300,
    check=True,
  )
  assert "total variation from the exact target distribution" in result.stdout
