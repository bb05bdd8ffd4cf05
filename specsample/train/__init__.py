"""Training with optax: drafts and the pipelines that build the bundled ones.

- optim: the one optimizer (AdamW, warmup + cosine decay); resume: resumable training state;
- seq2seq: T5 pairs (cross-entropy, on-policy KL; the bundled English->German models);
- target_responses: a target's responses, top-k log-probabilities and features;
- distill_decoder, distill_features: token-level and feature-level (EAGLE) drafts;
- smollm2_data, smollm2_token_draft / _card, smollm2_feature_draft / _card: the bundled
  SmolLM2 drafts' pipelines (scripts/train/train_smollm2_draft.py, train_smollm2_feature_draft.py).
"""
