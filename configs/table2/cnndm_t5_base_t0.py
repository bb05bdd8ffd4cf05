"""Table 2 row: CNN/DM, T5-XXL target, T5-base draft, temperature 0 (paper's gamma)."""

from specsample.eval.configs import table2_config


def get_config():
  return table2_config("cnndm", "t5-base", 0.0)
