"""Models behind the model contract (specsample.core.contract). They know nothing of speculation."""

from specsample.models.t5 import T5, T5Config
from specsample.models.toy import MarkovLM, MarkovState

__all__ = ["T5", "MarkovLM", "MarkovState", "T5Config"]
