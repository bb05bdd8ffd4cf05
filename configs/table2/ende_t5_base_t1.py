"""Table 2 row: WMT EnDe, T5-XXL target, T5-base draft, temperature 1 (paper's gamma)."""

from specsample.eval.configs import table2_config


def get_config():
  return table2_config("ende", "t5-base", 1.0)
