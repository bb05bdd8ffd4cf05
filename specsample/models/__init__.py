"""Models behind the model contract (specsample.core.contract). They know nothing of speculation."""

from specsample.models.decoder_only import DecoderOnly, DecoderOnlyConfig
from specsample.models.feature_draft import FeatureDraft
from specsample.models.kv_cache import KVCache
from specsample.models.t5 import T5, T5Config
from specsample.models.toy import MarkovFeatureDraft, MarkovLM, MarkovState

__all__ = [
  "DecoderOnly",
  "DecoderOnlyConfig",
  "FeatureDraft",
  "KVCache",
  "T5",
  "MarkovFeatureDraft",
  "MarkovLM",
  "MarkovState",
  "T5Config",
]
