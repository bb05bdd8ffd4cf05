"""The compiled decoding loops. They know models only through the model contract."""

from specsample.decoding.adaptive import AdaptiveDraft
from specsample.decoding.autoregressive import generate
from specsample.decoding.drafters import DraftTree, DynamicTree
from specsample.decoding.outputs import (
  DecodingStats,
  GenerationOutput,
  NonFiniteLogitsError,
  SpeculativeTrace,
)
from specsample.decoding.programs import clear_compiled_programs
from specsample.decoding.settings import MAX_GAMMA, SpeculativeSettings
from specsample.decoding.speculative import speculative_decode, speculative_program

__all__ = [
  "AdaptiveDraft",
  "DecodingStats",
  "DraftTree",
  "DynamicTree",
  "GenerationOutput",
  "NonFiniteLogitsError",
  "SpeculativeTrace",
  "MAX_GAMMA",
  "SpeculativeSettings",
  "clear_compiled_programs",
  "generate",
  "speculative_decode",
  "speculative_program",
]
