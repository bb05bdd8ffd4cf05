"""Models behind the model contract (specsample.core.contract). They know nothing of speculation."""

from specsample.models.toy import MarkovLM, MarkovState

__all__ = ["MarkovLM", "MarkovState"]
