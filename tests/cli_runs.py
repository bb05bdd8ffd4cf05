"""Runs the `specsample` command in this process and captures its exit status and output."""

from __future__ import annotations

from specsample.cli import main


def run(argv, capsys) -> tuple[int, list[str], str]:
  """(exit status, stderr lines, stdout) of the command; argparse errors exit too."""
  try:
    code = main(argv)
  except SystemExit as exit_:
    code = exit_.code
  captured = capsys.readouterr()
  return code, captured.err.strip().splitlines(), captured.out
