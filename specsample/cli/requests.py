"""What a command's flags ask for, read once from argparse's namespace into frozen values
that the commands pass on (nothing below them sees the namespace):

- `DecodingRequest` (generate, translate): gamma or "auto", sampling, verification, the
  draft shape, the seed and the runs; it makes the library's settings and checks them.
- `PromptFormat` (generate, bench): how input texts become token ids (chat template,
  system message, prefix, special-token text).
"""

from __future__ import annotations

import dataclasses
import sys
import time

from specsample.cli.options import UsageError
from specsample.core import SamplingConfig
from specsample.decoding import SpeculativeSettings
from specsample.decoding.adaptive import AdaptiveDraft
from specsample.decoding.drafters.dynamic_tree import DynamicTree

DEFAULT_GAMMA_CHECKED = 4  # the gamma that stands for "auto" or none when checking early


@dataclasses.dataclass(frozen=True)
class DecodingRequest:
  """The decoding flags (`options.add_decoding_options`)."""

  max_new_tokens: int
  sampling: SamplingConfig = SamplingConfig()
  gamma: int | str | None = None  # a number, "auto", or None: the command's default
  verification: str = "token"
  adaptive: AdaptiveDraft | None = None
  tree: int | DynamicTree | None = None  # K chains or a dynamic tree
  seed: int = 0
  recalibrate: bool = False  # gamma auto: time this machine's step costs again
  trace: str | None = None  # the HTML file of the acceptance trace
  repeats: int = 3  # timed runs (median)
  baseline: bool = True  # time the target alone too
  stream: bool = True  # print one input's text as it is accepted (a terminal)

  @property
  def needs_speculation(self) -> bool:
    """Whether the run asks for what plain decoding has not (a trace, a tree, adaptive
    drafting), so "auto" may not choose plain decoding."""
    return bool(self.trace or self.tree or self.adaptive)

  def settings(self, gamma: int | None) -> SpeculativeSettings:
    """The library's settings at `gamma` (which check themselves); None (plain decoding:
    `tuned_gamma`) keeps one draft token in them."""
    return SpeculativeSettings.of(
      gamma=1 if gamma is None else gamma, max_new_tokens=self.max_new_tokens,
      sampling=self.sampling, verification=self.verification, adaptive=self.adaptive,
      tree=self.tree,
    )  # fmt: skip

  def check(self) -> None:
    """Before any work: the options make valid settings together ("auto" or no --gamma
    stand in as DEFAULT_GAMMA_CHECKED)."""
    self.settings(self.gamma if isinstance(self.gamma, int) else DEFAULT_GAMMA_CHECKED)


def decoding_request(args) -> DecodingRequest:
  """The decoding flags of `generate` or `translate`."""
  return DecodingRequest(
    max_new_tokens=args.max_new_tokens,
    sampling=SamplingConfig(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p),
    gamma=args.gamma, verification=args.verification,
    adaptive=None if args.adaptive is None else AdaptiveDraft(threshold=args.adaptive),
    tree=args.tree, seed=args.seed, recalibrate=args.recalibrate, trace=args.trace,
    repeats=args.repeats, baseline=not args.no_baseline, stream=args.stream,
  )  # fmt: skip


def tuned_gamma(
  target,
  draft,
  prompts,
  request: DecodingRequest,
  *,
  default: int,
  prompt_lengths=None,
  pair_id: str | None = None,
  auto_for_one: bool = False,
) -> int | None:
  """--gamma: the number given; without one, "auto" for a batch (and for one prompt with
  `auto_for_one`), else `default`, and `default` with --trace, --tree or --adaptive; with
  "auto" the gamma tuned here (bench.tuning: a probe of a few prompts, the step costs of
  this machine, kept per `pair_id`; said on stderr), or None where no gamma is predicted to
  pay (decode plainly; `GammaChoice.decide`, the API's policy too)."""
  gamma = request.gamma
  if gamma is None:
    batch = len(prompts) > 1 or auto_for_one
    gamma = "auto" if batch and not request.needs_speculation else default
  if gamma != "auto":
    return gamma
  from specsample.bench.tuning import tune_gamma

  started = time.perf_counter()
  choice = tune_gamma(
    target, draft, prompts, sampling=request.sampling, verification=request.verification,
    seed=request.seed, prompt_lengths=prompt_lengths, pair_id=pair_id,
    recalibrate=request.recalibrate,
  )  # fmt: skip
  if not choice.not_weighed:
    print(f"{choice.summary()} in {time.perf_counter() - started:.1f} s", file=sys.stderr)
  tuned = choice.decide(must_speculate=request.needs_speculation)
  if tuned is None:
    print(choice.why_plain(), file=sys.stderr)
  return tuned


@dataclasses.dataclass(frozen=True)
class PromptFormat:
  """How input texts become token ids."""

  chat: bool | None = None  # the chat template (None: for a decoder-only model that has one)
  system: str | None = None  # the chat template's system message
  prefix: str | None = None  # put before each text (None or "": the pair's own)
  special: bool = False  # read special-token text in the inputs as those tokens

  def encode(self, texts, tokenizer, *, decoder_only: bool, prefix: str = "") -> list[list[int]]:
    """Token ids of `texts`: through the chat template (--chat; by default for a
    decoder-only model whose tokenizer has one), else `self.prefix` (or `prefix`, the
    pair's) + the text."""
    has_template = getattr(tokenizer, "chat_template", None) is not None
    chat = decoder_only and has_template if self.chat is None else self.chat
    if chat and not has_template:
      raise UsageError("--chat: this tokenizer has no chat template")
    if self.system and not chat:
      raise UsageError("--system needs the chat template (--chat)")
    prefix = self.prefix or prefix
    special = {"parse_special": True} if self.special else {}
    if special and not hasattr(tokenizer, "apply_chat_template"):
      raise UsageError("--special: this tokenizer (SentencePiece) reads no special-token text")
    prompts = []
    for text in texts:
      if chat:
        messages = [{"role": "system", "content": self.system}] if self.system else []
        messages.append({"role": "user", "content": text})
        prompts.append(tokenizer.apply_chat_template(messages, **special))
      else:
        prompts.append(tokenizer.encode(prefix + text, **special))
    return prompts


def prompt_format(args) -> PromptFormat:
  """The prompt flags of `generate` or `bench`."""
  return PromptFormat(chat=args.chat, system=args.system, prefix=args.prefix, special=args.special)
