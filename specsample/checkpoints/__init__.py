"""Checkpoint readers (T5X, Hugging Face) and tokenization; no t5x dependency."""

from specsample.checkpoints.huggingface import save_hf_t5
from specsample.checkpoints.loader import load_t5
from specsample.checkpoints.t5_params import CheckpointError
from specsample.checkpoints.t5x import read_t5x_params
from specsample.checkpoints.vocabulary import Vocabulary

__all__ = ["CheckpointError", "Vocabulary", "load_t5", "read_t5x_params", "save_hf_t5"]
