"""The public entry point: `speculative_generate`, with `gamma="auto"` resolved here.

It makes the static settings (`decoding.SpeculativeSettings`) from keyword arguments and
runs the compiled loop (`decoding.speculative_decode`). `gamma="auto"` measures alpha, c
and r on the caller's prompts on this machine (`specsample.bench.tune_gamma`), which is
why this sits above bench: the loops themselves never time anything.
"""

from __future__ import annotations

import jax

from specsample.bench.tuning import tune_gamma
from specsample.core.sampling import SamplingConfig
from specsample.core.verification import VerificationRule
from specsample.decoding import (
  AdaptiveDraft,
  DraftTree,
  DynamicTree,
  GenerationOutput,
  SpeculativeSettings,
  generate,
  speculative_decode,
)
from specsample.decoding.inputs import check_sampling
from specsample.decoding.streaming import OnTokens


def speculative_generate(
  target,
  draft,
  prompts,
  *,
  gamma: int | str = 4,
  max_new_tokens: int,
  sampling: SamplingConfig | None = None,
  verification: str | VerificationRule = "token",
  seed: int | jax.Array = 0,
  prompt_lengths=None,
  trace: bool = False,
  adaptive: AdaptiveDraft | bool | None = None,
  tree: DraftTree | DynamicTree | int | None = None,
  on_tokens: OnTokens | None = None,
) -> GenerationOutput:
  """Speculative sampling: the output is distributed exactly as `generate(target, ...)`.

  Args:
    target: the model whose distribution the output follows (model contract).
    draft: the cheaper model that proposes tokens; same vocabulary as the target.
    prompts: int[batch, prompt_length] (with optional `prompt_lengths`), or a list of
      token lists of any lengths.
    gamma: draft tokens proposed per iteration (static), 1..64; or "auto": alpha from
      a probe run on at most 4 of these prompts, c and r measured on them on this
      machine, and the gamma the speedup model prefers (`specsample.bench.tune_gamma`;
      pass its `pair_id` there to keep c and r between calls); where no gamma is
      predicted to pay by a margin (`GammaChoice.pays`: 1.15x for one prompt, 1.4x for
      a batch; a weak draft, a slow verify call), or where a CPU gets more than 8
      prompts (not weighed: `tuning.MAX_WEIGHED_ROWS_CPU`), the batch is decoded
      plainly and `output.stats.gamma` is 0 (not with trace, adaptive or tree). That
      costs a probe run and a few compilations per call: when decoding many batches,
      tune once and pass the number. The gamma used is `output.stats.gamma`.
    max_new_tokens: tokens to generate per row at most (rows also end at the target's EOS).
    sampling: temperature / top-k / top-p, applied identically to draft and target.
      Temperature 0 decodes greedily and then equals greedy `generate` token for token.
    verification: "token" (Leviathan et al. Alg. 1) or "block" (Sun et al. 2024); with
      temperature 0 both reduce to "greedy", which may also be named directly. A
      callable `(key, draft_tokens, draft_probs, target_probs) -> Verdict` plugs in a
      rule of your own (it is static: pass the same function object to reuse the
      compiled program); check its exactness with `MarkovLM.exact_distribution`.
    seed: int or jax PRNG key. The same seed gives the same output.
    trace: also record every iteration's draft tokens, accepted count and next token
      (`output.trace`, for the acceptance-trace picture); a separate compiled program.
    adaptive: draft a variable number of tokens per row and iteration, up to gamma:
      each row stops after a token the draft is unsure of, with a per-row threshold its
      acceptance steers (`AdaptiveDraft`; True takes its defaults). Exact with every
      built-in rule; the target's call is as wide as the longest row's block.
    tree: draft K chains of gamma tokens per row with distinct first tokens (`DraftTree`,
      or K as an int) and verify them in one tree-shaped target call: recursive
      rejection sampling over the first tokens (drawn without replacement), then
      token-wise along the accepted chain (greedy: the draft's top-K first tokens,
      longest match wins). Or `DynamicTree(nodes=N)`: each row grows its own tree of
      the draft's N most likely continuations, gamma deep (EAGLE-2 style), verified in
      one tree call by rejection sampling down the tree (greedy: the deepest path the
      target's argmax follows). Trees need models with `extend_tree` / `keep_path` (T5,
      DecoderOnly, MarkovLM). The trace records the path accepted.
    on_tokens: `on_tokens(row, token_ids)`, called from inside the compiled loop with
      each row's newly accepted tokens (only those kept: none past max_new_tokens or the
      row's EOS), in order; concatenated per row they are the row's output. A separate
      compiled program with the same tokens (`specsample.decoding.streaming`; `stream`
      for an iterator).

  Returns:
    GenerationOutput: tokens int32[batch, max_new_tokens] (pad after each row's end),
    lengths int32[batch], DecodingStats (alpha, tokens_per_target_call, histogram, ...),
    and the SpeculativeTrace when asked for.
  """
  if isinstance(gamma, str) and gamma == "auto":
    choice = tune_gamma(
      target,
      draft,
      prompts,
      sampling=check_sampling(sampling),
      verification=verification,
      prompt_lengths=prompt_lengths,
      seed=seed,
    )
    tuned = choice.decide(must_speculate=bool(trace or adaptive or tree))
    if tuned is None:  # plain decoding is faster here
      return generate(
        target,
        prompts,
        max_new_tokens=max_new_tokens,
        sampling=sampling,
        seed=seed,
        prompt_lengths=prompt_lengths,
        on_tokens=on_tokens,
      )
    gamma = tuned
  elif isinstance(gamma, str):
    raise ValueError(f'gamma must be a positive int or "auto", got {gamma!r}')
  settings = SpeculativeSettings.of(
    gamma=gamma,
    max_new_tokens=max_new_tokens,
    sampling=sampling,
    verification=verification,
    trace=trace,
    adaptive=adaptive,
    tree=tree,
  )
  return speculative_decode(
    target, draft, prompts, settings, seed=seed, prompt_lengths=prompt_lengths,
    on_tokens=on_tokens,
  )  # fmt: skip
