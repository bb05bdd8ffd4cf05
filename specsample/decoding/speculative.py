"""Speculative sampling as one compiled `lax.while_loop` (Leviathan et al. 2023, Alg. 1).

Each iteration, for every unfinished row of the batch at once:
  1. Draft: gamma autoregressive draft steps give x_1..x_gamma and p_1..p_gamma.
  2. Target: ONE multi-token call over [last, x_1..x_gamma] gives q_1..q_{gamma+1}.
  3. Verify (core.verification): n accepted tokens and the next token y per row.
  4. Commit x_1..x_n, y to the output buffer; rows end at EOS or max_new_tokens.
  5. Rewind both caches to the committed prefix (only end indices move).

Invariants between iterations (per row):
  - the target cache holds every committed token but `last_token`;
  - the draft cache lags by one or two committed tokens, `draft_pending`: it never saw
    y, nor x_gamma when all gamma were accepted. Step 1 catches up on them with one
    extend whose logits at the last pending token give p_1: over 2 tokens when some row
    owes 2, over 1 token otherwise (`lax.cond`; the common case, and cheaper).
  - a feature draft (`uses_target_features`, e.g. models.feature_draft) reads the
    target's features: the target's verify call returns them, the draft is rewound to
    before x_1 (its entries for the block were made from its own predicted features) and
    owes x_1..x_n, y, each paired with the target's feature of the position before it.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from specsample.core.contract import LanguageModel, uses_target_features
from specsample.core.sampling import SamplingConfig, logits_to_probs
from specsample.core.verification import (
  VERIFICATION_RULES,
  VerificationRule,
  verify,
  verify_greedy,
)
from specsample.decoding.adaptive import AdaptiveDraft
from specsample.decoding.counters import LoopCounters
from specsample.decoding.drafting import draft_adaptive_block, draft_fixed_block
from specsample.decoding.inputs import (
  check_feature_pair,
  check_model,
  check_positive_int,
  check_sampling,
  make_key,
  prepare_prompts,
  prompt_pad_id,
)
from specsample.decoding.iteration import bad_logits_used, finish_iteration
from specsample.decoding.outputs import GenerationOutput, SpeculativeTrace, raise_on_nonfinite
from specsample.decoding.tree_loop import DraftTree, new_positions, supports_trees, tree_iteration

MAX_GAMMA = 64  # draft tokens per iteration at most (the paper's best are 3-7)


@dataclasses.dataclass(frozen=True)
class SpeculativeSettings:
  """Static settings: changing any of them compiles a new program."""

  gamma: int
  max_new_tokens: int
  sampling: SamplingConfig
  rule: str | VerificationRule  # "token", "block", "greedy", or a custom rule
  record_trace: bool = False
  adaptive: AdaptiveDraft | None = None  # per-row draft length up to gamma (None: fixed)
  tree: DraftTree | None = None  # K draft chains verified as a tree (None: one chain)


@struct.dataclass(kw_only=True)
class SpeculativeLoopState:
  target_state: Any  # target cache: every committed token but last_token
  draft_state: Any  # draft cache: every committed token but the draft_pending ones
  last_token: jax.Array  # int32[batch]
  draft_pending: jax.Array  # int32[batch, w]: committed tokens the draft has not seen
  draft_num_pending: jax.Array  # int32[batch]: 1 or 2 (w = 2); feature drafts 1..gamma + 1
  # Feature drafts: the target's feature before each pending token [batch, gamma + 1, d].
  draft_pending_features: jax.Array | None = None
  tokens: jax.Array  # int32[batch, max_new_tokens]
  lengths: jax.Array  # int32[batch]
  done: jax.Array  # bool[batch]
  key: jax.Array
  counters: LoopCounters
  trace: SpeculativeTrace | None  # per-iteration record, when asked for
  thresholds: jax.Array | None  # float32[batch]: adaptive draft length's confidence bars


def _speculative_loop(
  target: LanguageModel,
  draft: LanguageModel,
  prompts: jax.Array,
  prompt_lengths: jax.Array,
  key: jax.Array,
  settings: SpeculativeSettings,
) -> tuple[GenerationOutput, dict[str, jax.Array]]:
  gamma = settings.gamma
  batch = prompts.shape[0]
  num_new_positions = settings.max_new_tokens + gamma + 1  # room for a full block at the end
  if settings.tree is not None:
    num_new_positions = settings.max_new_tokens + new_positions(gamma, settings.tree)
  with_features = uses_target_features(draft)
  pending_features = None
  if with_features:
    target_state, pending, features = target.init_state_with_features(
      prompts, prompt_lengths, num_new_positions
    )  # features: [batch, prompt_length, d]
    draft_state, draft_pending = draft.init_state(
      prompts, prompt_lengths, num_new_positions, features=features
    )
    # The pending last prompt token's pair: the feature of the position before it.
    before = jnp.maximum(prompt_lengths - 2, 0)[:, None, None]  # [batch, 1, 1]
    first = jnp.take_along_axis(features, before, axis=1)[:, 0].astype(jnp.float32)
    first = jnp.where((prompt_lengths >= 2)[:, None], first, 0.0)  # [batch, d]
    pending_features = jnp.zeros((batch, gamma + 1, first.shape[-1]), jnp.float32)
    pending_features = pending_features.at[:, 0].set(first)
    pending_tokens = jnp.full((batch, gamma + 1), target.pad_id, jnp.int32)
    pending_tokens = pending_tokens.at[:, 0].set(draft_pending)
  else:
    target_state, pending = target.init_state(prompts, prompt_lengths, num_new_positions)
    draft_state, draft_pending = draft.init_state(prompts, prompt_lengths, num_new_positions)
    pending_tokens = jnp.stack([draft_pending, jnp.full_like(draft_pending, target.pad_id)], 1)
  init = SpeculativeLoopState(
    target_state=target_state,
    draft_state=draft_state,
    last_token=pending,
    draft_pending=pending_tokens,
    draft_num_pending=jnp.ones((batch,), jnp.int32),
    draft_pending_features=pending_features,
    tokens=jnp.full((batch, settings.max_new_tokens), target.pad_id, jnp.int32),
    lengths=jnp.zeros((batch,), jnp.int32),
    done=jnp.zeros((batch,), bool),
    key=key,
    counters=LoopCounters.zeros(batch, gamma),
    trace=_empty_trace(batch, settings) if settings.record_trace else None,
    thresholds=None if settings.adaptive is None else settings.adaptive.initial_thresholds(batch),
  )
  need_probs = settings.rule != "greedy"  # greedy verification compares tokens only

  def iteration(s: SpeculativeLoopState) -> SpeculativeLoopState:
    key, draft_key, verify_key = jax.random.split(s.key, 3)
    active = ~s.done  # [batch]
    target_end = s.target_state.end_index  # [batch]
    draft_end = s.draft_state.end_index  # [batch]

    # 1. Draft gamma tokens (adaptive: m <= gamma per row).  x: [batch, gamma],
    #    p: [batch, gamma, vocab]
    draft_args = (draft, s.draft_state, s.draft_pending, s.draft_num_pending, active, draft_key)
    options = dict(gamma=gamma, sampling=settings.sampling, need_probs=need_probs)
    if settings.adaptive is None:
      block = draft_fixed_block(*draft_args, **options, pending_features=s.draft_pending_features)
    else:
      block = draft_adaptive_block(*draft_args, s.thresholds, **options)
    x, p, m = block.tokens, block.probs, block.num_drafted
    m_or_gamma = jnp.full((batch,), gamma, jnp.int32) if m is None else m  # [batch]

    # 2. Score [last, x_1..x_m] with ONE target call.  logits: [batch, gamma + 1, vocab]
    target_tokens = jnp.concatenate([s.last_token[:, None], x], axis=1)
    num_scored = jnp.where(active, m_or_gamma + 1, 0)
    target_features = None  # feature drafts: [batch, gamma + 1, d]
    if with_features:
      target_logits, target_features, target_state = target.extend_with_features(
        s.target_state, target_tokens, num_scored
      )
    else:
      target_logits, target_state = _score(target, s.target_state, target_tokens, num_scored, m)

    # 3. Verify: n accepted draft tokens and the next token y.  [batch] each
    if settings.rule == "greedy":
      n, y = verify_greedy(x, target_logits, m)  # argmax of the logits: no softmax needed
    else:
      q = logits_to_probs(target_logits, settings.sampling)
      n, y = verify(settings.rule, verify_key, x, p, q, m)
    target_bad, draft_bad = bad_logits_used(target_logits, block.bad, n, active)

    # 4.-5. Commit x_1..x_n, y, and rewind: the target keeps last, x_1..x_n (y is
    #    pending); the draft saw x_1..x_{m-1}, so it keeps x_1..x_min(n, m-1) and owes y
    #    (and x_m). A feature draft keeps only what it made from the target's features,
    #    through last, and owes x_1..x_n, y.
    target_state = target.rewind(target_state, jnp.where(active, target_end + n + 1, target_end))
    draft_kept = draft_end + s.draft_num_pending + jnp.minimum(n, m_or_gamma - 1)
    if with_features:  # its catch-up ended at last
      draft_kept = draft_end + s.draft_num_pending
    draft_state = draft.rewind(block.state, jnp.where(active, draft_kept, draft_end))
    counters = s.counters.record(
      active=active,
      n=n,
      target_bad=target_bad,
      draft_bad=draft_bad,
      num_drafted=m,
      draft_steps=block.steps,
    )
    thresholds = s.thresholds
    if settings.adaptive is not None:
      thresholds = settings.adaptive.update(
        thresholds, last_accepted=n == m_or_gamma, counted=active & ~(target_bad | draft_bad)
      )
    return finish_iteration(
      s,
      active=active,
      x=x,
      m=m_or_gamma,
      n=n,
      y=y,
      target_bad=target_bad,
      draft_bad=draft_bad,
      eos_id=target.eos_id,
      pad_id=target.pad_id,
      pending_features=target_features,
      target_state=target_state,
      draft_state=draft_state,
      key=key,
      counters=counters,
      thresholds=thresholds,
    )

  step = iteration
  if settings.tree is not None:
    step = functools.partial(tree_iteration, target, draft, settings=settings)
  final = jax.lax.while_loop(lambda s: ~jnp.all(s.done), step, init)
  output = GenerationOutput(
    tokens=final.tokens, lengths=final.lengths, stats=final.counters.stats(), trace=final.trace
  )
  flags = {"target": final.counters.target_nonfinite, "draft": final.counters.draft_nonfinite}
  return output, flags


def _score(target: LanguageModel, state, tokens: jax.Array, num_scored: jax.Array, m):
  """The target's one call over [last, x_1..x_gamma] (tokens int32[batch, gamma + 1]).

  With adaptive lengths (m int32[batch]) the call is only as wide as the longest row
  needs, max(m) + 1 tokens (`lax.switch` over the widths: on CPUs a call costs more the
  more tokens it scores). Returns logits [batch, gamma + 1, vocab]; positions past a
  row's m + 1 are padding no rule reads.
  """
  width = tokens.shape[1]
  if m is None:
    return target.extend(state, tokens, num_scored)

  def scorer(k: int):
    def score(state):
      logits, state = target.extend(state, tokens[:, :k], num_scored)
      return jnp.pad(logits, ((0, 0), (0, width - k), (0, 0)), mode="edge"), state

    return score

  widest = jnp.max(jnp.where(num_scored > 0, num_scored, 2))  # in 2..gamma + 1
  return jax.lax.switch(widest - 2, [scorer(k) for k in range(2, width + 1)], state)


def _empty_trace(batch: int, settings: SpeculativeSettings) -> SpeculativeTrace:
  iterations = settings.max_new_tokens  # each iteration commits >= 1 token per active row
  zeros = jnp.zeros((iterations, batch), jnp.int32)
  return SpeculativeTrace(
    drafts=jnp.zeros((iterations, batch, settings.gamma), jnp.int32),
    drafted=zeros,
    accepted=zeros,
    next_token=zeros,
    active=jnp.zeros((iterations, batch), bool),
  )


_speculative_compiled = jax.jit(_speculative_loop, static_argnames=("settings",))


def speculative_generate(
  target: LanguageModel,
  draft: LanguageModel,
  prompts,
  *,
  gamma: int = 4,
  max_new_tokens: int,
  sampling: SamplingConfig | None = None,
  verification: str | VerificationRule = "token",
  seed: int | jax.Array = 0,
  prompt_lengths=None,
  trace: bool = False,
  adaptive: AdaptiveDraft | bool | None = None,
  tree: DraftTree | int | None = None,
) -> GenerationOutput:
  """Speculative sampling: the output is distributed exactly as `generate(target, ...)`.

  Args:
    target: the model whose distribution the output follows (model contract).
    draft: the cheaper model that proposes tokens; same vocabulary as the target.
    prompts: int[batch, prompt_length] (with optional `prompt_lengths`), or a list of
      token lists of any lengths.
    gamma: draft tokens proposed per iteration (static), 1..MAX_GAMMA.
      (`specsample.speculative_generate` also takes "auto".)
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
      longest match wins); needs
      models with `extend_tree` / `keep_path` (T5, DecoderOnly, MarkovLM). The trace
      records the chain the accepted path followed.

  Returns:
    GenerationOutput: tokens int32[batch, max_new_tokens] (pad after each row's end),
    lengths int32[batch], DecodingStats (alpha, tokens_per_target_call, histogram, ...),
    and the SpeculativeTrace when asked for.
  """
  check_model("target", target)
  check_model("draft", draft)
  if draft.vocab_size != target.vocab_size:
    raise ValueError(
      f"draft and target must share a vocabulary: draft vocab_size={draft.vocab_size}, "
      f"target vocab_size={target.vocab_size}"
    )
  sampling = check_sampling(sampling)
  if isinstance(gamma, str):
    raise ValueError(
      f"gamma must be a positive int, got {gamma!r}"
      + (
        ' (gamma="auto" measures this machine: use specsample.speculative_generate, or '
        "specsample.bench.tune_gamma once and pass its gamma)"
        if gamma == "auto"
        else ""
      )
    )
  gamma = check_positive_int("gamma", gamma)
  if gamma > MAX_GAMMA:
    raise ValueError(
      f"gamma must be <= {MAX_GAMMA}, got {gamma}: each iteration drafts gamma tokens one "
      "by one, and acceptance falls off long before that (the paper's best gammas are 3-7)"
    )
  if not callable(verification) and verification not in VERIFICATION_RULES:
    raise ValueError(
      f"unknown verification {verification!r}; expected one of {VERIFICATION_RULES} "
      "or a callable rule"
    )
  if verification == "greedy" and not sampling.is_greedy:
    raise ValueError(
      "verification='greedy' is only exact at temperature 0; use 'token' or 'block' "
      f"for temperature {sampling.temperature}"
    )
  if adaptive is True:
    adaptive = AdaptiveDraft()
  elif adaptive is False:
    adaptive = None
  if adaptive is not None and not isinstance(adaptive, AdaptiveDraft):
    raise TypeError(f"adaptive must be an AdaptiveDraft, True, False or None, got {adaptive!r}")
  if adaptive is not None and callable(verification):
    raise ValueError(
      "adaptive draft length works with the built-in rules ('token', 'block', greedy); "
      "a custom rule sees fixed-length drafts only"
    )
  if isinstance(tree, int) and not isinstance(tree, bool):
    tree = None if tree == 1 else DraftTree(num_chains=tree)
  if tree is not None:
    if not isinstance(tree, DraftTree):
      raise TypeError(f"tree must be a DraftTree or a number of chains, got {tree!r}")
    if adaptive is not None:
      raise ValueError("adaptive draft length and tree drafts cannot be combined (yet)")
    if callable(verification) or verification == "block":
      raise ValueError(
        "tree drafts are verified by recursive rejection sampling over the chains (greedy "
        "at temperature 0); verification must be 'token' (the default) with them"
      )
    if tree.num_chains > target.vocab_size:
      raise ValueError(f"tree has {tree.num_chains} chains but the vocabulary {target.vocab_size}")
    for role, model in (("target", target), ("draft", draft)):
      if not supports_trees(model):
        raise ValueError(
          f"the {role} model ({type(model).__name__}) has no extend_tree/keep_path, which "
          "tree drafts need (T5, DecoderOnly and MarkovLM have them)"
        )
  if uses_target_features(draft):
    check_feature_pair(target, draft, adaptive=adaptive, tree=tree)
  settings = SpeculativeSettings(
    gamma=gamma,
    max_new_tokens=check_positive_int("max_new_tokens", max_new_tokens),
    sampling=sampling,
    rule="greedy" if sampling.is_greedy and not callable(verification) else verification,
    record_trace=bool(trace),
    adaptive=adaptive,
    tree=tree,
  )
  prompts, prompt_lengths = prepare_prompts(
    prompts,
    prompt_lengths,
    vocab_size=target.vocab_size,
    pad_id=target.pad_id,
    prompt_pad_id=prompt_pad_id(target),
  )
  key = make_key(seed)  # after every input check: a key is a first computation
  output, nonfinite = _speculative_compiled(target, draft, prompts, prompt_lengths, key, settings)
  raise_on_nonfinite(nonfinite)
  return output
