"""Models behind the model contract (specsample.core.contract). They know nothing of speculation."""

from specsample.models.decoder_only import DecoderOnly, DecoderOnlyConfig
from specsample.models.t5 import T5, T5Config
from specsample.models.toy import MarkovLM, MarkovState

__all__ = ["DecoderOnly", "DecoderOnlyConfig", "T5", "MarkovLM", "MarkovState", "T5Config"]
