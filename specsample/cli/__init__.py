"""The `specsample` command (`specsample.cli.main.main`) and what only it uses: the
side-by-side comparison of speculative and plain decoding, the acceptance trace, the demo."""

from specsample.cli.main import main

__all__ = ["main"]
