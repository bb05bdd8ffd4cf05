"""The compiled decoding loops. They know models only through the model contract."""

from specsample.decoding.adaptive import AdaptiveDraft
from specsample.decoding.autoregressive import generate
from specsample.decoding.outputs import (
  DecodingStats,
  GenerationOutput,
  NonFiniteLogitsError,
  SpeculativeTrace,
)
from specsample.decoding.programs import clear_compiled_programs
from specsample.decoding.speculative import speculative_generate
from specsample.decoding.tree_loop import DraftTree

__all__ = [
  "AdaptiveDraft",
  "DecodingStats",
  "DraftTree",
  "GenerationOutput",
  "NonFiniteLogitsError",
  "SpeculativeTrace",
  "clear_compiled_programs",
  "generate",
  "speculative_generate",
]
