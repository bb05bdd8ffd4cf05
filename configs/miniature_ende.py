"""Offline miniature: the bundled English->German pair on its shipped test split."""

from specsample.eval.configs import miniature_config


def get_config():
  return miniature_config("ende")
