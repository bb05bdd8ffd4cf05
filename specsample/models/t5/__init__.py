"""T5 (v1.0 and v1.1/Flan) in Flax, with a multi-token KV cache behind the model contract."""

from specsample.models.t5.config import PRESETS, T5Config, from_hf_config, preset, to_hf_config
from specsample.models.t5.model import T5, T5State

__all__ = ["PRESETS", "T5", "T5Config", "T5State", "from_hf_config", "preset", "to_hf_config"]
