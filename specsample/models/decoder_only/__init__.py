"""A decoder-only transformer (Llama layout and its relatives) behind the model contract."""

from specsample.models.decoder_only.config import PRESETS, DecoderOnlyConfig, GemmaLayers, preset
from specsample.models.decoder_only.model import DecoderOnly, DecoderOnlyState
from specsample.models.decoder_only.network import DecoderOnlyNetwork, rotary

__all__ = [
  "PRESETS",
  "DecoderOnly",
  "DecoderOnlyConfig",
  "DecoderOnlyNetwork",
  "DecoderOnlyState",
  "GemmaLayers",
  "preset",
  "rotary",
]
