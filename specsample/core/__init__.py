"""Pure array math of speculative sampling: no flax, no models.

- `sampling`: logits -> probabilities (temperature, top-k, top-p), shared by both models.
- `verification`: token-wise, block and greedy acceptance rules.
- `speedup`: alpha, expected tokens per iteration, predicted speedup.
- `contract`: the protocol every model implements for the decoding loops.
"""

from specsample.core.contract import LanguageModel, ModelState
from specsample.core.sampling import (
  GREEDY,
  SamplingConfig,
  argmax_tokens,
  logits_to_probs,
  nonfinite_logits,
  sample_from_probs,
)
from specsample.core.speedup import (
  acceptance_probability,
  best_gamma,
  expected_accepted_tokens,
  expected_tokens_per_iteration,
  mean_acceptance_probability,
  theoretical_speedup,
)
from specsample.core.verification import (
  VERIFICATION_RULES,
  Verdict,
  VerificationRule,
  block_acceptance_probabilities,
  verify,
  verify_block,
  verify_greedy,
  verify_tokenwise,
)

__all__ = [
  "GREEDY",
  "VERIFICATION_RULES",
  "LanguageModel",
  "ModelState",
  "SamplingConfig",
  "Verdict",
  "VerificationRule",
  "acceptance_probability",
  "mean_acceptance_probability",
  "argmax_tokens",
  "best_gamma",
  "expected_accepted_tokens",
  "expected_tokens_per_iteration",
  "logits_to_probs",
  "nonfinite_logits",
  "sample_from_probs",
  "theoretical_speedup",
  "verify",
  "block_acceptance_probabilities",
  "verify_block",
  "verify_greedy",
  "verify_tokenwise",
]
