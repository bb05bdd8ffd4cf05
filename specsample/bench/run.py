"""`specsample bench`: measure a pair with a progress bar and write JSON, markdown, plots."""

from __future__ import annotations

import os
import pathlib
import platform
import time
from collections.abc import Sequence

import jax

from specsample.bench.output import markdown, plot, report_dict
from specsample.bench.pair import bench_pair, bench_steps
from specsample.bench.pair_report import BenchSettings, PairReport
from specsample.files import FileSet


def cpu_model() -> str:
  """The CPU's model name ("Intel(R) Xeon(R) Processor", ...) from /proc/cpuinfo, else
  what `platform` knows."""
  try:
    for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
      if line.startswith("model name"):
        return line.split(":", 1)[1].strip()
  except OSError:
    pass
  return platform.processor() or platform.machine()


def machine_description() -> dict:
  device = jax.devices()[0]
  return {
    "platform": device.platform,
    "device": device.device_kind,
    "device_count": jax.device_count(),
    "cpu": platform.processor() or platform.machine(),
    "cpu_cores": os.cpu_count(),
    "jax": jax.__version__,
  }


def run_bench(
  target,
  draft,
  prompts: Sequence[Sequence[int]],
  settings: BenchSettings,
  out_dir: str | pathlib.Path,
  *,
  title: str,
  show_progress: bool = True,
  sampling_draft=None,
) -> tuple[PairReport, dict[str, str]]:
  """Benchmarks the pair and writes report.json, report.md and the plots into out_dir
  (`sampling_draft`: the draft at temperatures above 0, `bench.pair.bench_pair`)."""
  from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

  out_dir = pathlib.Path(out_dir)
  out_dir.mkdir(parents=True, exist_ok=True)
  start = time.time()
  with Progress(
    TextColumn("{task.description:<40}"),
    BarColumn(),
    TextColumn("{task.completed}/{task.total}"),
    TimeElapsedColumn(),
    disable=not show_progress,
    transient=False,
  ) as bar:
    task = bar.add_task("benchmark", total=bench_steps(settings))
    started = [False]

    def progress(description: str) -> None:
      if started[0]:
        bar.advance(task)
      started[0] = True
      bar.update(task, description=description)

    report = bench_pair(
      target, draft, prompts, settings, progress=progress, sampling_draft=sampling_draft
    )
    bar.advance(task)
  context = {"title": title, "machine": machine_description(), "wall_seconds": time.time() - start}
  files = {"json": str(out_dir / "report.json"), "markdown": str(out_dir / "report.md")}
  out_dir.mkdir(parents=True, exist_ok=True)
  # The report's files together: none replaces an old one unless every one was written.
  with FileSet(out_dir) as fileset:
    fileset.write_json("report.json", report_dict(report, **context), indent=2)
    fileset.write_text("report.md", markdown(report, title=title))
    for path in plot(report, out_dir, title=title, fileset=fileset):
      files[pathlib.Path(path).stem] = path
  return report, files
