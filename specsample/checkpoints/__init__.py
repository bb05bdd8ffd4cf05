"""Checkpoint readers (GGUF, Hugging Face, T5X), hub ids, tokenizers; no t5x dependency."""

from specsample.checkpoints.decoder_only import save_hf_decoder_only
from specsample.checkpoints.errors import CheckpointError
from specsample.checkpoints.huggingface import save_hf_t5
from specsample.checkpoints.loader import load_model, load_t5, load_tokenizer
from specsample.checkpoints.t5x import read_t5x_params
from specsample.checkpoints.tokenizer import Tokenizer
from specsample.checkpoints.vocabulary import Vocabulary

__all__ = [
  "CheckpointError",
  "Tokenizer",
  "Vocabulary",
  "load_model",
  "load_t5",
  "load_tokenizer",
  "read_t5x_params",
  "save_hf_decoder_only",
  "save_hf_t5",
]
