"""Offline miniature: the bundled docstring-summarization pair on its shipped test split."""

from specsample.eval.configs import miniature_config


def get_config():
  return miniature_config("docstrings")
