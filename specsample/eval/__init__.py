"""Evaluation: translation quality (sacrebleu) and speculative statistics of a pair."""
