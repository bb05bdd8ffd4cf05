"""Table 2 row: CNN/DM, T5-XXL target, T5-large draft, temperature 1 (paper's gamma)."""

from specsample.eval.configs import table2_config


def get_config():
  return table2_config("cnndm", "t5-large", 1.0)
