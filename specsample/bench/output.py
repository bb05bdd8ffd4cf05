"""A PairReport as JSON, as a markdown report, and as plots (matplotlib)."""

from __future__ import annotations

import dataclasses
import pathlib

from specsample import files
from specsample.bench.pair_report import PairReport
from specsample.bench.timing import seconds_per_token
from specsample.core import theoretical_speedup


def report_dict(report: PairReport, **context) -> dict:
  """Everything measured, with derived ratios, as plain JSON-ready data."""
  costs = report.costs
  gammas = report.settings.gammas
  return {
    **context,
    "settings": dataclasses.asdict(report.settings),
    "num_prompts": report.num_prompts,
    "costs": {
      "target_seconds": {str(k): v for k, v in costs.target_seconds.items()},
      "draft_seconds": costs.draft_seconds,
      "c": costs.c,
      "r": {str(g): costs.r(g) for g in gammas},
    },
    "analytic_alpha": {f"{t:g}": a for t, a in report.analytic_alpha.items()},
    "autoregressive_seconds": {f"{t:g}": s for t, s in report.autoregressive_seconds.items()},
    "sweep": [
      {
        **dataclasses.asdict(p),
        "speedup": p.speedup,
        "efficiency": p.efficiency,
        "seconds_per_iteration": p.seconds_per_iteration,
        "overhead_fraction": p.overhead_fraction,
      }
      for p in report.sweep
    ],
    "batch": [{**dataclasses.asdict(b), "speedup": b.speedup} for b in report.batch],
    "phases": [
      {
        **dataclasses.asdict(p),
        **{name: getattr(p, name) for name in PHASE_FIELDS},
        "model_draft_per_iteration": p.gamma * costs.draft_seconds,
        "model_verify_per_iteration": costs.target_seconds.get(p.gamma + 1),
        "model_step_per_token": costs.target_seconds[1],
        "tokens_per_iteration": p.tokens_per_iteration,
        "predicted_without_prefill": p.predicted_without_prefill(
          costs.draft_seconds, costs.target_seconds
        ),
        "efficiency_without_prefill": p.efficiency_without_prefill(
          costs.draft_seconds, costs.target_seconds
        ),
      }
      for p in report.phases
    ],
    "roofs": dataclasses.asdict(report.roofs) if report.roofs is not None else None,
    "call_floors": {str(k): v for k, v in report.call_floors.items()},
    "rooflines": [
      {
        **dataclasses.asdict(row),
        "memory_fraction": row.memory_fraction,
        "arithmetic_fraction": row.arithmetic_fraction,
      }
      for row in report.rooflines
    ],
    "autoregressive_tokens": {f"{t:g}": n for t, n in report.autoregressive_tokens.items()},
    "best": {
      f"{t:g}": {
        "measured_gamma": report.best(t).gamma,
        "measured_speedup": report.best(t).speedup,
        "model_gamma": report.model_best_gamma(t),
      }
      for t in report.settings.temperatures
    },
  }


PHASE_FIELDS = (
  "draft_per_iteration",
  "verify_per_iteration",
  "bookkeeping_per_iteration",
  "step_per_token",
  "autoregressive_bookkeeping_per_token",
  "speedup",
  "speedup_without_prefill",
)


def write_json(report: PairReport, path: str | pathlib.Path, **context) -> None:
  """The report as JSON, written whole or not at all (specsample.files)."""
  files.write_json(path, report_dict(report, **context), indent=2)


def markdown(report: PairReport, *, title: str = "Benchmark") -> str:
  """The report as markdown tables: costs, the best settings, the sweep, batch scaling."""
  costs, settings = report.costs, report.settings
  lines = [f"## {title}", ""]
  lines += [
    f"{report.num_prompts} prompts at batch 1, up to {settings.max_new_tokens} new tokens, "
    f"medians of {settings.repeats} timed runs (compilation excluded). A speedup S is plain "
    "decoding's ms per generated token / speculative decoding's, on the same prompts.",
    "",
    f"- t_target(1) = {1e3 * costs.target_seconds[1]:.2f} ms, "
    f"t_draft(1) = {1e3 * costs.draft_seconds:.2f} ms, **c = {costs.c:.3f}**",
    "- r(gamma+1) = t_target(gamma+1) / t_target(1): "
    + ", ".join(f"{g}: {costs.r(g):.2f}" for g in settings.gammas),
    "- analytic alpha (E[sum min(p, q)] along the target's outputs): "
    + ", ".join(f"T={t:g}: {a:.3f}" for t, a in report.analytic_alpha.items()),
    "",
    "| temperature | measured best gamma | speedup | model's best gamma |",
    "|---|---|---|---|",
  ]
  for t in settings.temperatures:
    best = report.best(t)
    lines.append(f"| {t:g} | {best.gamma} | {best.speedup:.2f}x | {report.model_best_gamma(t)} |")
  lines += [
    "",
    "| T | shape | gamma | alpha | tokens/call | S measured | S paper (r=1) | S with r "
    "| efficiency | ms/iteration | overhead |",
    "|---|---|---|---|---|---|---|---|---|---|---|",
  ]
  for p in report.sweep:
    lines.append(
      f"| {p.temperature:g} | {p.shape} | {p.gamma} | {p.alpha:.3f} | "
      f"{p.tokens_per_target_call:.2f} | {p.speedup:.2f}x | {p.predicted_paper:.2f}x | "
      f"{p.predicted_with_r:.2f}x | {p.efficiency:.2f} | {1e3 * p.seconds_per_iteration:.2f} | "
      f"{100 * p.overhead_fraction:.0f}% |"
    )
  if report.batch:
    lines += [
      "",
      "| T | batch | gamma | autoregressive ms/token | speculative ms/token | speedup "
      "| tokens/s (spec.) |",
      "|---|---|---|---|---|---|---|",
    ]
    for b in report.batch:
      plain_ms = 1e3 * seconds_per_token(b.autoregressive_seconds, b.autoregressive_tokens)
      spec_ms = 1e3 * seconds_per_token(b.speculative_seconds, b.new_tokens)
      lines.append(
        f"| {b.temperature:g} | {b.batch_size} | {b.gamma} | {plain_ms:.2f} | {spec_ms:.2f} | "
        f"{b.speedup:.2f}x | {b.new_tokens / b.speculative_seconds:.0f} |"
      )
  if report.phases:
    lines += ["", *phase_table(report)]
  if report.roofs is not None:
    lines += ["", *roofline_table(report)]
  return "\n".join(lines) + "\n"


def phase_table(report: PairReport) -> list[str]:
  """Where the time goes at each temperature's best gamma: measured in the loops against
  what the cost model charges (milliseconds)."""
  costs = report.costs
  phase_prompts = min(report.num_prompts, report.settings.phase_prompts)
  lines = [
    "Where the time goes (batch 1, measured best gamma, on the first "
    f"{phase_prompts} prompts; ms; the cost "
    "model's charge in brackets; `bench.phases`; efficiency: S without prefill over the "
    "cost model's speedup at the same tokens per call):",
    "",
    "| T | gamma | draft phase / iteration | verify / iteration | bookkeeping / iteration "
    "| plain step / token | plain bookkeeping / token | prefill / prompt "
    "| S | S without prefill | tokens / call | model without prefill | efficiency |",
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
  ]
  for p in report.phases:
    verify_model = costs.target_seconds.get(p.gamma + 1)
    verify_model = f" ({1e3 * verify_model:.2f})" if verify_model else ""
    predicted = p.predicted_without_prefill(costs.draft_seconds, costs.target_seconds)
    efficiency = p.efficiency_without_prefill(costs.draft_seconds, costs.target_seconds)
    lines.append(
      f"| {p.temperature:g} | {p.gamma} | {1e3 * p.draft_per_iteration:.2f} "
      f"({1e3 * p.gamma * costs.draft_seconds:.2f}) | {1e3 * p.verify_per_iteration:.2f}"
      f"{verify_model} | {1e3 * p.bookkeeping_per_iteration:.2f} (0) | "
      f"{1e3 * p.step_per_token:.2f} ({1e3 * costs.target_seconds[1]:.2f}) | "
      f"{1e3 * p.autoregressive_bookkeeping_per_token:.2f} (0) | "
      f"{1e3 * p.prefill_seconds / phase_prompts:.2f} | {p.speedup:.2f}x | "
      f"{p.speedup_without_prefill:.2f}x | {p.tokens_per_iteration:.2f} | "
      f"{predicted:.2f}x | {efficiency:.2f} |"
    )
  return lines


_ARITHMETIC = {
  "float32": "GFLOP/s float32",
  "int8": "G operations/s of the 8-bit-activation kernel",
  "int8x2": "G operations/s of the 8-bit-activation kernel over two passes (half its rate)",
}


def roofline_table(report: PairReport) -> list[str]:
  """Weight traffic per token and each decoder's fraction of the memory and arithmetic
  rooflines (`bench.roofline`), and the target's k-row calls against their floors."""
  roofs, costs = report.roofs, report.costs
  lines = [
    f"Rooflines (`bench.roofline`; measured in this run: {roofs.bandwidth / 1e9:.1f} GB/s "
    f"streaming weights, {roofs.arithmetic / 1e9:.0f} {_ARITHMETIC[roofs.arithmetic_kind]}; "
    "weight traffic only, batch 1):",
    "",
    "| T | decoder | ms/token | weight MB/token | GFLOP/token | memory floor ms "
    "| of memory roofline | arithmetic floor ms | of arithmetic roofline |",
    "|---|---|---|---|---|---|---|---|---|",
  ]
  for row in report.rooflines:
    lines.append(
      f"| {row.temperature:g} | {row.decoder} | {1e3 * row.seconds_per_token:.2f} | "
      f"{row.bytes_per_token / 1e6:.1f} | {row.operations_per_token / 1e9:.2f} | "
      f"{1e3 * row.memory_floor:.2f} | {100 * row.memory_fraction:.0f}% | "
      f"{1e3 * row.arithmetic_floor:.2f} | {100 * row.arithmetic_fraction:.0f}% |"
    )
  floors = report.call_floors
  ks = sorted(floors)
  lines += [
    "",
    "| k (target rows per call) | " + " | ".join(str(k) for k in ks) + " |",
    "|---|" + "---|" * len(ks),
    "| t(k) ms | " + " | ".join(f"{1e3 * costs.target_seconds[k]:.2f}" for k in ks) + " |",
    "| floor ms | " + " | ".join(f"{1e3 * floors[k]:.2f}" for k in ks) + " |",
    "| of roofline | "
    + " | ".join(f"{100 * floors[k] / costs.target_seconds[k]:.0f}%" for k in ks)
    + " |",
    "| r(k) measured | " + " | ".join(f"{costs.r(k - 1):.2f}" for k in ks) + " |",
    "| r(k) at the floors | " + " | ".join(f"{floors[k] / floors[1]:.2f}" for k in ks) + " |",
  ]
  return lines


def plot(
  report: PairReport,
  directory: str | pathlib.Path,
  *,
  title: str = "",
  fileset: files.FileSet | None = None,
) -> list[str]:
  """Writes speedup_vs_gamma.png, acceptance_histogram.png and batch_scaling.png (into
  `fileset`, renamed into place with the rest of its files; else a set of their own).
  Returns their paths."""
  directory = pathlib.Path(directory)
  if fileset is None:
    directory.mkdir(parents=True, exist_ok=True)
    with files.FileSet(directory) as own:
      return plot(report, directory, title=title, fileset=own)
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  costs, settings = report.costs, report.settings
  written = []

  fig, ax = plt.subplots(figsize=(7, 4.5))
  for i, t in enumerate(settings.temperatures):
    for shape in settings.shapes:
      marker, linestyle = shape_style(shape)
      points = [p for p in report.sweep if p.temperature == t and p.shape == shape]
      if not points:
        continue
      color = f"C{i}"
      ax.plot(
        [p.gamma for p in points],
        [p.speedup for p in points],
        marker=marker,
        color=color,
        linestyle=linestyle,
        label=f"measured, T={t:g}, {shape}",
      )
      if shape == "token":
        alpha = sum(p.alpha for p in points) / len(points)
        gammas = list(settings.gammas)
        ax.plot(
          gammas,
          [theoretical_speedup(alpha, g, costs.c, costs.r(g)) for g in gammas],
          color=color,
          linestyle="--",
          alpha=0.6,
          label=f"theory with r, T={t:g} (alpha {alpha:.2f})",
        )
  ax.axhline(1.0, color="grey", linewidth=0.8)
  ax.set_xlabel("gamma (draft tokens per iteration)")
  ax.set_ylabel("speedup over autoregressive")
  ax.set_title(title or "Speedup vs gamma")
  ax.legend(fontsize=7)
  written.append(_save(fig, fileset, "speedup_vs_gamma.png"))

  fig, axes = plt.subplots(
    1, len(settings.temperatures), figsize=(4 * len(settings.temperatures), 3.5)
  )
  for ax, t in zip(list(getattr(axes, "flat", [axes])), settings.temperatures, strict=True):
    best = report.best(t)
    counts = best.accepted_histogram
    ax.bar(range(len(counts)), counts, color="tab:green")
    ax.set_xlabel(f"accepted draft tokens (gamma {best.gamma})")
    ax.set_ylabel("iterations")
    ax.set_title(f"T={t:g}, alpha {best.alpha:.2f}")
  written.append(_save(fig, fileset, "acceptance_histogram.png"))

  if report.batch:
    fig, ax = plt.subplots(figsize=(6, 4))
    for i, t in enumerate(settings.temperatures):
      points = [b for b in report.batch if b.temperature == t]
      ax.plot(
        [b.batch_size for b in points],
        [b.speedup for b in points],
        marker="o",
        color=f"C{i}",
        label=f"T={t:g}, gamma {points[0].gamma}",
      )
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("batch size")
    ax.set_ylabel("speculative speedup over autoregressive")
    ax.set_title("Batch scaling")
    ax.legend(fontsize=8)
    written.append(_save(fig, fileset, "batch_scaling.png"))
  return written


# Draft shapes in the speedup plot: (marker, line style); trees of other sizes share theirs.
SHAPE_STYLES = {
  "token": ("o", "-"), "block": ("s", ":"), "adaptive": ("^", "-."),
  "tree2": ("D", "--"), "tree3": ("v", "--"), "tree4": ("P", "--"), "dynamic": ("*", "--"),
}  # fmt: skip


def shape_style(shape: str) -> tuple[str, str]:
  """A sweep shape's (marker, line style) in the speedup plot."""
  if shape in SHAPE_STYLES:
    return SHAPE_STYLES[shape]
  return ("*", "--") if shape.startswith("dynamic") else ("x", "--")


def _save(fig, fileset: files.FileSet, name: str) -> str:
  """Saves the figure as the set's file `name`; returns the path it will have."""
  import matplotlib.pyplot as plt

  fig.tight_layout()
  try:
    fig.savefig(fileset.path(name), dpi=110)
  finally:
    plt.close(fig)
  return str(fileset.directory / name)
