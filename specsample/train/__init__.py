"""Training with optax: drafts and the pipelines that build the bundled ones.

- optim: the one optimizer (AdamW, warmup + cosine decay); resume: resumable training state;
- seq2seq: T5 pairs (cross-entropy, on-policy KL; the bundled English->German models);
- target_responses: a target's responses, top-k log-probabilities and features;
- distill_decoder, distill_features: token-level and feature-level (EAGLE) drafts;
- pipeline: one pipeline of stages on a loaded target, a recipe per draft kind
  (token_draft_recipe, feature_draft_recipe; their settings *_options, cards *_card; what
  they share: pipeline_data); scripts/train/train_smollm2_draft.py, train_smollm2_feature_draft.py;
- response_store, on_policy, on_policy_stages, store_features: the committed store of
  on-policy responses and the features recomputed from it.
"""
