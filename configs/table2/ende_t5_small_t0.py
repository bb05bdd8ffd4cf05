"""Table 2 row: WMT EnDe, T5-XXL target, T5-small draft, temperature 0 (paper's gamma)."""

from specsample.eval.configs import table2_config


def get_config():
  return table2_config("ende", "t5-small", 0.0)
