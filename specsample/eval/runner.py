"""`run_eval`: the target alone and target + draft speculatively over a task's eval split.

For each batch of examples (batch 1 by default, as in the paper) the target decodes
alone, then the pair decodes speculatively, with the same prompts, seed and settings;
both are timed side by side (compilation excluded: each new prompt shape is run once
untimed first). Finished examples go to `<workdir>/examples.jsonl` as they complete, so
an interrupted eval continues where it stopped. At the end c and r are measured on one
prompt, and the report (JSON + markdown, the paper's row beside ours) is written.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import jax
import numpy as np

from specsample.core import SamplingConfig
from specsample.decoding import generate, speculative_decode
from specsample.eval.configs import Pipeline
from specsample.eval.errors import ConfigError, examples_path, require_modules
from specsample.eval.store import ResultStore

MIN_BUCKET = 8
# The keys of every record decode_batch writes (a stored line without them is corrupt).
RECORD_FIELDS = (
  "index", "input", "reference", "target_output", "speculative_output", "target_tokens",
  "speculative_tokens", "accepted", "rejected", "iterations", "target_seconds",
  "speculative_seconds",
)  # fmt: skip


def bucket_width(length: int, cap: int) -> int:
  """The padded prompt width for a prompt of `length` tokens: the next power of two
  (at least MIN_BUCKET), at most `cap`. Few widths means few compilations."""
  width = MIN_BUCKET
  while width < length:
    width *= 2
  return max(min(width, cap), length)


def extra_modules(pipeline: Pipeline) -> tuple[str, ...]:
  """The eval-extra modules the pipeline imports (ROUGE only for a ROUGE task)."""
  rouge = ("rouge_score",) if pipeline.task.metric == "rouge" else ()
  return ("seqio", "tensorflow", "tensorflow_datasets", *rouge)


def make_task(pipeline: Pipeline):
  """The pipeline's seqio.Task (nothing is read until its dataset is iterated). Raises
  MissingExtraError without the eval extra, ConfigError for a missing file."""
  require_modules(extra_modules(pipeline))
  from specsample.data.tasks import build_task

  try:
    return build_task(
      pipeline.task, pipeline.vocabulary, pipeline.source,
      files=pipeline.files or None, data_dir=pipeline.data_dir or None,
    )  # fmt: skip
  except (ValueError, OSError) as error:
    raise ConfigError(str(error)) from error


def open_store(pipeline: Pipeline) -> ResultStore:
  """The run's results file, keyed by its settings and its checkpoints' contents."""
  return ResultStore(
    examples_path(pipeline.workdir), pipeline.fingerprint(), pipeline.checkpoints(),
    fields=RECORD_FIELDS,
  )  # fmt: skip


def load_models(pipeline: Pipeline):
  """(target, draft) as T5 models (`specsample.load_pair`, without a tokenizer: the task
  brings its vocabulary), on the pipeline's mesh when it has one. Raises ConfigError for a
  checkpoint that cannot be read."""
  from specsample.checkpoints import CheckpointError
  from specsample.pairs import PairSpec

  spec = PairSpec(
    target=pipeline.target.path, draft=pipeline.draft.path,
    target_preset=pipeline.target.preset or None, draft_preset=pipeline.draft.preset or None,
    dtype=pipeline.dtype, weights="float32", activations="float32", prompt_lookup=False,
    sharded=bool(pipeline.mesh), with_tokenizer=False,
  )  # fmt: skip
  try:
    pair = spec.load()
  except (CheckpointError, OSError) as error:
    raise ConfigError(f"checkpoint: {error}") from error
  if pipeline.mesh:
    from specsample.scaling.shard import make_mesh

    pair = pair.placed(make_mesh(pipeline.mesh))
  return pair.target, pair.draft


def _place(prompts: Sequence[Sequence[int]], width: int, target) -> tuple:
  """(prompts, lengths) arrays of the batch padded to `width` (on the mesh if sharded)."""
  partitioning = getattr(target, "partitioning", None)
  if partitioning is not None:
    from specsample.scaling.shard import global_prompts

    array, lengths, _ = global_prompts(prompts, partitioning.mesh, width=width)
    return array, lengths
  from specsample.bench.pair import pad_to_width

  return pad_to_width(prompts, width)


def decode_batch(
  target, draft, examples: Sequence, pipeline: Pipeline, decode_text: Callable, compiled: set
) -> list[dict]:
  """Decodes one batch both ways; returns one record per example."""
  prompts = [example.inputs for example in examples]
  width = bucket_width(max(len(p) for p in prompts), pipeline.task.input_length)
  array, lengths = _place(prompts, width, target)
  sampling = SamplingConfig(temperature=pipeline.temperature)
  seed = pipeline.seed + examples[0].index  # the same on a resumed run

  def plain():
    return generate(
      target, array, prompt_lengths=lengths, max_new_tokens=pipeline.max_new_tokens,
      sampling=sampling, seed=seed,
    )  # fmt: skip

  settings = pipeline.speculative_settings()

  def speculative():
    return speculative_decode(target, draft, array, settings, seed=seed, prompt_lengths=lengths)

  shape = (width, len(prompts))
  if shape not in compiled:
    jax.block_until_ready(plain().tokens)
    jax.block_until_ready(speculative().tokens)
    compiled.add(shape)
  start = time.perf_counter()
  ar = plain()
  jax.block_until_ready(ar.tokens)
  middle = time.perf_counter()
  sp = speculative()
  jax.block_until_ready(sp.tokens)
  end = time.perf_counter()

  rows = len(examples)
  ar_sequences, sp_sequences = ar.sequences()[:rows], sp.sequences()[:rows]
  stats = {
    name: np.asarray(jax.device_get(getattr(sp.stats, name)))[:rows]
    for name in ("accepted", "rejected", "iterations")
  }
  records = []
  for i, example in enumerate(examples):
    records.append(
      {
        "index": example.index,
        "input": example.input_text,
        "reference": example.reference,
        "target_output": decode_text(ar_sequences[i]),
        "speculative_output": decode_text(sp_sequences[i]),
        "target_tokens": len(ar_sequences[i]),
        "speculative_tokens": len(sp_sequences[i]),
        "accepted": int(stats["accepted"][i]),
        "rejected": int(stats["rejected"][i]),
        "iterations": int(stats["iterations"][i]),
        # The batch's wall time, shared evenly by its rows (sums give batch totals).
        "target_seconds": (middle - start) / rows,
        "speculative_seconds": (end - middle) / rows,
      }
    )
  return records


def _decoder(vocabulary) -> Callable[[list[int]], str]:
  eos = vocabulary.eos_id

  def decode(ids: list[int]) -> str:
    if eos in ids:
      ids = ids[: ids.index(eos)]
    return vocabulary.decode([i for i in ids if i != 0])

  return decode


def run_eval(
  pipeline: Pipeline,
  *,
  show_progress: bool = True,
  models: tuple | None = None,
  stop_after: int | None = None,
) -> dict:
  """Runs (or resumes) the eval and writes report.json / report.md into the workdir.

  `models` (target, draft) skips loading (tests, notebooks); `stop_after` ends the run
  after that many new examples without a report, as an interruption would (tests of
  resuming). Returns the report (or {} when stopped early).
  """
  from specsample.eval.report import build_report, write_report
  from specsample.progress import progress_bar

  # The cheap checks first: the workdir's results and the checkpoints, then the data.
  store = open_store(pipeline)
  done = store.load()
  task = make_task(pipeline)
  from specsample.data.tasks import eval_examples  # seqio, TensorFlow

  try:
    examples = eval_examples(task, pipeline.task, pipeline.split, pipeline.max_examples)
  except ValueError as error:
    raise ConfigError(str(error)) from error
  if not examples:
    raise ConfigError(f"split {pipeline.split!r} of {pipeline.task.name} has no examples")
  target, draft = models or load_models(pipeline)
  decode_text = _decoder(task.output_features["targets"].vocabulary)
  todo = [e for e in examples if e.index not in done]
  batches = [todo[i : i + pipeline.batch_size] for i in range(0, len(todo), pipeline.batch_size)]
  compiled: set = set()
  new = 0
  with progress_bar(f"{pipeline.name:<32}", disable=not show_progress) as bar:
    progress = bar.add_task("eval", total=len(examples), completed=len(examples) - len(todo))
    for batch in batches:
      records = decode_batch(target, draft, batch, pipeline, decode_text, compiled)
      store.append(records)
      for record in records:
        done[record["index"]] = record
      bar.advance(progress, len(batch))
      new += len(batch)
      if stop_after is not None and new >= stop_after:
        return {}
  records = [done[e.index] for e in examples]
  report = build_report(pipeline, records, target, draft, examples[0].inputs)
  write_report(report, pipeline.workdir)
  return report
