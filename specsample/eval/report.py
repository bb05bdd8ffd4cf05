"""The eval report: quality of both decoders, alpha, c, r, speedup, the paper's row.

`build_report` aggregates the per-example records (see runner.decode_batch) exactly as
`DecodingStats` does for one run: alpha = accepted / (accepted + rejected), tokens per
target call = generated tokens / iterations, speedup = the target alone's seconds
per generated token / the speculative decoder's, each summed over the examples
(bench.timing.measured_speedup).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from specsample.bench.timing import measured_speedup
from specsample.core import theoretical_speedup
from specsample.eval.configs import Pipeline
from specsample.eval.metrics import paired_bootstrap, score
from specsample.files import FileSet

REPORT_FIELDS = (
  "name", "task", "split", "examples", "settings", "target", "draft", "quality",
  "identical_outputs", "alpha", "tokens_per_target_call", "speedup", "c", "r",
  "predicted_speedup", "efficiency", "seconds", "paper", "machine",
)  # fmt: skip


def aggregate(records: Sequence[dict]) -> dict:
  """alpha, tokens per target call, speedup and totals over per-example records."""
  accepted = sum(r["accepted"] for r in records)
  verified = accepted + sum(r["rejected"] for r in records)
  iterations = sum(r["iterations"] for r in records)
  target_seconds = sum(r["target_seconds"] for r in records)
  speculative_seconds = sum(r["speculative_seconds"] for r in records)
  target_tokens = sum(r["target_tokens"] for r in records)
  speculative_tokens = sum(r["speculative_tokens"] for r in records)
  timed = speculative_seconds > 0 and min(target_tokens, speculative_tokens) > 0
  return {
    "alpha": accepted / verified if verified else float("nan"),
    "tokens_per_target_call": speculative_tokens / iterations if iterations else float("nan"),
    "speedup": measured_speedup(
      target_seconds, target_tokens, speculative_seconds, speculative_tokens
    )
    if timed
    else float("nan"),
    "seconds": {"target": target_seconds, "speculative": speculative_seconds},
    "identical_outputs": sum(r["target_output"] == r["speculative_output"] for r in records)
    / len(records),
  }


def quality(pipeline: Pipeline, records: Sequence[dict]) -> dict:
  """Metric of each decoder and the paired-bootstrap interval of their difference."""
  references = [r["reference"] for r in records]
  target = [r["target_output"] for r in records]
  speculative = [r["speculative_output"] for r in records]
  metric = pipeline.task.metric
  return {
    "metric": metric,
    "target": score(metric, target, references),
    "speculative": score(metric, speculative, references),
    "difference_ci95": paired_bootstrap(
      metric,
      target,
      speculative,
      references,
      samples=pipeline.bootstrap_samples,
      seed=pipeline.seed,
    ),  # fmt: skip
  }


def build_report(
  pipeline: Pipeline, records: Sequence[dict], target, draft, cost_prompt: Sequence[int]
) -> dict:
  """The full report; c and r are measured here on `cost_prompt` (batch 1)."""
  from specsample.bench.pair import measure_costs
  from specsample.bench.run import machine_description

  totals = aggregate(records)
  costs = measure_costs(target, draft, list(cost_prompt), pipeline.gamma, pipeline.cost_repeats)
  c, r = costs.c, costs.r(pipeline.gamma)
  alpha = totals["alpha"]
  predicted = {
    "paper": theoretical_speedup(alpha, pipeline.gamma, c),
    "with_r": theoretical_speedup(alpha, pipeline.gamma, c, r),
  }
  row = pipeline.paper_row
  settings = pipeline.describe()
  return {
    "name": pipeline.name,
    "task": pipeline.task.name,
    "split": pipeline.split,
    "examples": len(records),
    "settings": {
      k: settings[k]
      for k in (
        "gamma",
        "temperature",
        "verification",
        "batch_size",
        "max_new_tokens",
        "dtype",
        "seed",
        "source",
        "files",
        "vocabulary",
        "mesh",
      )
    },  # fmt: skip
    "target": settings["target"],
    "draft": settings["draft"],
    "quality": quality(pipeline, records),
    "identical_outputs": totals["identical_outputs"],
    "alpha": alpha,
    "tokens_per_target_call": totals["tokens_per_target_call"],
    "speedup": totals["speedup"],
    "c": c,
    "r": r,
    "predicted_speedup": predicted,
    "efficiency": totals["speedup"] / predicted["with_r"],
    "seconds": totals["seconds"],
    "paper": None
    if row is None
    else {
      "row": row.key,
      "label": row.label,
      "gamma": row.gamma,
      "alpha": row.alpha,
      "speedup": row.speedup,
    },  # fmt: skip
    "machine": machine_description(),
  }


def _machine_text(machine: dict) -> str:
  """Where the run was: "4 x TPU v4 (tpu)" or "CPU (x86_64, 2 cores), jax 0.10.2"."""
  if machine["platform"] == "cpu":
    cpu, cores = machine.get("cpu") or "unknown", machine.get("cpu_cores") or "?"
    return f"CPU ({cpu}, {cores} cores), jax {machine.get('jax')}"
  return f"{machine['device_count']} x {machine['device']} ({machine['platform']})"


def _quality_text(report: dict, decoder: str) -> str:
  scores = report["quality"][decoder]
  keys = ("bleu",) if "bleu" in scores else ("rouge1", "rouge2", "rougeL")
  return " / ".join(f"{scores[k]:.2f}" for k in keys)


def markdown(report: dict) -> str:
  """Our row beside the paper's, then quality, costs and the settings."""
  q = report["quality"]
  metric_name = "BLEU" if q["metric"] == "bleu" else "ROUGE-1 / 2 / L"
  settings = report["settings"]
  lines = [
    f"## {report['name']}",
    "",
    f"{report['task']} `{report['split']}`, {report['examples']} examples, gamma "
    f"{settings['gamma']}, temperature {settings['temperature']:g}, "
    f"{settings['verification']}-wise verification, batch {settings['batch_size']}, "
    f"on {_machine_text(report['machine'])}.",
    "",
    "| | gamma | alpha | tokens / target call | speedup | predicted (paper / with r) |",
    "|---|---|---|---|---|---|",
  ]
  paper = report["paper"]
  if paper:
    lines.append(
      f"| paper: {paper['label']} | {paper['gamma']} | {paper['alpha']:.2f} | | "
      f"{paper['speedup']:.1f}x | |"
    )
  p = report["predicted_speedup"]
  lines += [
    f"| ours | {settings['gamma']} | {report['alpha']:.3f} | "
    f"{report['tokens_per_target_call']:.2f} | {report['speedup']:.2f}x | "
    f"{p['paper']:.2f}x / {p['with_r']:.2f}x |",
    "",
    f"| {metric_name} | target alone | speculative | difference (95% interval) |",
    "|---|---|---|---|",
  ]
  for key, diff in q["difference_ci95"].items():
    lines.append(
      f"| {key} | {q['target'][key]:.2f} | {q['speculative'][key]:.2f} | "
      f"{diff['difference']:+.2f} ({diff['low']:+.2f}, {diff['high']:+.2f}) |"
    )
  lines += [
    "",
    f"Identical outputs: {100 * report['identical_outputs']:.1f}% of examples. "
    f"c = {report['c']:.3f}, r(gamma+1) = {report['r']:.2f}, efficiency (measured / "
    f"predicted with r) = {report['efficiency']:.2f}. Wall time: target alone "
    f"{report['seconds']['target']:.1f} s, speculative {report['seconds']['speculative']:.1f} s.",
    "",
    f"Target: {report['target']['path']} ({report['target']['parameters'] / 1e6:.1f}M "
    f"parameters); draft: {report['draft']['path']} "
    f"({report['draft']['parameters'] / 1e6:.1f}M).",
    "",
  ]
  return "\n".join(lines)


def write_report(report: dict, workdir: str) -> dict[str, str]:
  os.makedirs(workdir, exist_ok=True)
  paths = {
    "json": os.path.join(workdir, "report.json"),
    "markdown": os.path.join(workdir, "report.md"),
  }
  with FileSet(workdir) as files:  # both replaced together, or neither
    files.write_json("report.json", report, indent=2)
    files.write_text("report.md", markdown(report))
  return paths


def _headline_key(report: dict) -> str:
  return "bleu" if report["quality"]["metric"] == "bleu" else "rouge1"


def summary_table(reports: Sequence[dict]) -> str:
  """One line per report (e.g. the miniature's grid), the paper's numbers where they exist.

  Quality is BLEU, or ROUGE-1 / 2 / L; the difference (speculative - target alone, with
  its 95% paired-bootstrap interval) is of BLEU or ROUGE-1.
  """
  lines = [
    "| run | T | gamma | metric | target alone | speculative | difference (95% interval) | "
    "identical | alpha | tokens / call | c | r(gamma+1) | predicted (with r) | speedup | "
    "efficiency | paper alpha / speedup |",
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
  ]
  for rep in reports:
    s, paper = rep["settings"], rep["paper"]
    key = _headline_key(rep)
    diff = rep["quality"]["difference_ci95"][key]
    metric = "BLEU" if key == "bleu" else "ROUGE-1/2/L"
    paper_text = f"{paper['alpha']:.2f} / {paper['speedup']:.1f}x" if paper else "-"
    lines.append(
      f"| {rep['name']} | {s['temperature']:g} | {s['gamma']} | {metric} | "
      f"{_quality_text(rep, 'target')} | {_quality_text(rep, 'speculative')} | "
      f"{diff['difference']:+.2f} ({diff['low']:+.2f}, {diff['high']:+.2f}) | "
      f"{100 * rep['identical_outputs']:.0f}% | {rep['alpha']:.3f} | "
      f"{rep['tokens_per_target_call']:.2f} | {rep['c']:.3f} | {rep['r']:.2f} | "
      f"{rep['predicted_speedup']['with_r']:.2f}x | {rep['speedup']:.2f}x | "
      f"{rep['efficiency']:.2f} | {paper_text} |"
    )
  return "\n".join(lines) + "\n"
