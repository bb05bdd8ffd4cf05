"""specsample: speculative sampling for JAX/Flax language models.

from specsample import SamplingConfig, generate, load_model, load_tokenizer, speculative_generate
"""

from specsample.api import speculative_generate
from specsample.checkpoints import load_model, load_t5, load_tokenizer
from specsample.core.sampling import SamplingConfig
from specsample.decoding import (
  AdaptiveDraft,
  DecodingStats,
  DraftTree,
  DynamicTree,
  GenerationOutput,
  NonFiniteLogitsError,
  SpeculativeSettings,
  generate,
)
from specsample.decoding.streaming import TokenStream, stream

__version__ = "0.1.0"

__all__ = [
  "AdaptiveDraft",
  "DecodingStats",
  "DraftTree",
  "DynamicTree",
  "GenerationOutput",
  "NonFiniteLogitsError",
  "SamplingConfig",
  "SpeculativeSettings",
  "TokenStream",
  "generate",
  "load_model",
  "load_t5",
  "load_tokenizer",
  "speculative_generate",
  "stream",
]
