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
"""

from __future__ import annotations

import json
import sys

from absl import app, flags
from ml_collections import config_flags

_CONFIG = config_flags.DEFINE_config_file("config", None, "eval config file", lock_config=True)
_DRY_RUN = flags.DEFINE_bool("dry_run", False, "resolve and print the pipeline, then stop")
_QUIET = flags.DEFINE_bool("quiet", False, "no progress bar")
flags.mark_flags_as_required(["config"])


def main(argv) -> int:
  del argv
  from specsample.eval.configs import resolve
  from specsample.eval.report import markdown
  from specsample.eval.runner import make_task, run_eval

  pipeline = resolve(_CONFIG.value)
  if _DRY_RUN.value:
    task = make_task(pipeline)
    features = {k: f.vocabulary.__class__.__name__ for k, f in task.output_features.items()}
    print(json.dumps({**pipeline.describe(), "seqio_task": task.name, "features": features},
                     indent=2, default=str))  # fmt: skip
    return 0

  report = run_eval(pipeline, show_progress=not _QUIET.value)
  print(markdown(report))
  print(f"written: {pipeline.workdir}/report.json, report.md, examples.jsonl", file=sys.stderr)
  return 0


if __name__ == "__main__":
  app.run(main)
