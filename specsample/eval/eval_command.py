"""Evaluates a target alone and target + draft speculatively over a task's eval split.

  python scripts/eval.py --config=configs/miniature_ende.py
  python scripts/eval.py --config=configs/table2/ende_t5_small_t0.py \
      --config.data_dir=gs://my-bucket/tfds --config.max_examples=500
  python scripts/eval.py --config=configs/table2/cnndm_t5_base_t1.py \
      --config.checkpoint_format=hf --config.target.hf=/models/t5-11b \
      --config.draft.hf=/models/t5-base --config.vocabulary=/models/t5-11b/spiece.model

Every field of the config can be overridden (`--config.gamma=5`); `--dry_run` checks the
config and prints the resolved pipeline without reading weights or data. The run writes
`<workdir>/examples.jsonl` as it goes (rerun the same command to resume an interrupted
eval), then `report.json` and `report.md` with the paper's row beside ours.

Exit codes: 0 done; 2 a config error (one line `eval.py: ...` on stderr: a bad field, a
missing file or checkpoint, a workdir holding other results, the eval extra missing);
130 interrupted (Ctrl-C; rerunning resumes).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence

from absl import flags
from ml_collections import config_flags

from specsample.eval.errors import ConfigError, examples_path, run_command

PROG = "eval.py"
HELP = ("-h", "--help", "--helpshort", "--helpfull")


def _define_flags(argv: Sequence[str]):
  """The flags, on a FlagValues of their own (main can run more than once in a process)."""
  values = flags.FlagValues()
  config = config_flags.DEFINE_config_file(
    "config", None, "eval config file", flag_values=values, lock_config=True, sys_argv=argv
  )
  dry_run = flags.DEFINE_bool(
    "dry_run", False, "resolve and print the pipeline, then stop", flag_values=values
  )
  quiet = flags.DEFINE_bool("quiet", False, "no progress bar", flag_values=values)
  flags.mark_flag_as_required("config", flag_values=values)
  return values, config, dry_run, quiet


def main(argv: Sequence[str] | None = None) -> int:
  """Runs the eval of `argv` (sys.argv by default); returns the exit code."""
  argv = list(sys.argv if argv is None else argv)
  workdir: list[str] = []  # set once the config is resolved, for the resume message

  def body() -> int:
    values, config, dry_run, quiet = _define_flags(argv)
    if any(arg in HELP for arg in argv[1:]):
      print(__doc__ + "\n" + values.get_help())
      return 0
    try:
      values(argv)
    except OSError as error:  # a config file that cannot be read
      raise ConfigError(f"--config: {error}") from error
    except (AttributeError, KeyError) as error:
      name = str(error).strip("\"'")
      overridden = {arg.split("=")[0].rsplit(".", 1)[-1] for arg in argv if "." in arg}
      if name not in overridden:
        raise  # not an override of a field the config lacks: a bug in the config file
      raise ConfigError(
        f"the config has no field {name!r} to override (its fields: base_config() in "
        "specsample/eval/configs.py)"
      ) from error

    from specsample.eval.configs import resolve
    from specsample.eval.report import markdown
    from specsample.eval.runner import make_task, run_eval

    pipeline = resolve(config.value)
    workdir.append(pipeline.workdir)
    if dry_run.value:
      described = {**pipeline.describe(), "checkpoints": pipeline.checkpoints()}
      task = make_task(pipeline)
      features = {k: f.vocabulary.__class__.__name__ for k, f in task.output_features.items()}
      print(json.dumps({**described, "seqio_task": task.name, "features": features},
                       indent=2, default=str))  # fmt: skip
      return 0

    report = run_eval(pipeline, show_progress=not quiet.value)
    print(markdown(report))
    print(f"written: {pipeline.workdir}/report.json, report.md, examples.jsonl", file=sys.stderr)
    return 0

  resume = lambda: examples_path(workdir[-1]) if workdir else None
  return run_command(PROG, body, resume, usage_errors=(flags.Error,))
