"""specsample: speculative sampling for JAX/Flax language models.

from specsample import SamplingConfig, generate, load_model, load_tokenizer, speculative_generate

The names below are imported when first used (PEP 562), so that `import specsample` is
cheap: the `specsample` command answers Ctrl-C from its first moment (specsample.entry)
while JAX and the models are still being imported.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

# name -> the module it comes from
_EXPORTS = {
  "AdaptiveDraft": "specsample.decoding",
  "DecodingStats": "specsample.decoding",
  "DraftTree": "specsample.decoding",
  "DynamicTree": "specsample.decoding",
  "GenerationOutput": "specsample.decoding",
  "NonFiniteLogitsError": "specsample.decoding",
  "SamplingConfig": "specsample.core.sampling",
  "SpeculativeSettings": "specsample.decoding",
  "TokenStream": "specsample.decoding.streaming",
  "generate": "specsample.decoding",
  "load_model": "specsample.checkpoints",
  "load_pair": "specsample.pairs",
  "load_t5": "specsample.checkpoints",
  "load_tokenizer": "specsample.checkpoints",
  "speculative_generate": "specsample.api",
  "stream": "specsample.decoding.streaming",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
  if name not in _EXPORTS:
    raise AttributeError(f"module 'specsample' has no attribute {name!r}")
  value = getattr(importlib.import_module(_EXPORTS[name]), name)
  globals()[name] = value  # imported once
  return value


def __dir__() -> list[str]:
  return sorted(set(globals()) | set(_EXPORTS))
