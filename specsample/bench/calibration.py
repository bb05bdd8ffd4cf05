"""Step costs measured on this machine once, kept for the next runs (`gamma="auto"`).

The speedup model needs c = t_draft(1) / t_target(1) and r(k) = t_target(k) / t_target(1)
(bench.costs). They depend on the machine (its instruction sets: on a CPU with AVX2 and no
AVX-512 a 4-row verify call costs 1.6 one-row steps where AVX-512 VNNI pays 1.2-1.4), on
the pair and its arithmetic, and on the batch size, but hardly on the text: so they are
timed once per (machine, pair, batch size) on a synthetic prompt of CONTEXT tokens, in a
few seconds plus the step programs' compilation, and kept in the user's cache directory
(`cache_path()`: $SPECSAMPLE_CACHE_DIR, else $XDG_CACHE_HOME/specsample, else
~/.cache/specsample; one JSON file, rewritten atomically). `recalibrate=True` (the command
line's --recalibrate) measures them again. A machine is named by its CPU model, the
kernels' instruction sets (SPECSAMPLE_SMALL_K_ISA forces one), the kernels' build
(`kernels.native.build_id`: a new version's kernels, built at its install, are timed
anew), its core count and the jax version; a pair by the caller's id (`pairs.Pair.id`:
the checkpoints' paths, sizes and modification times, the draft, the weights and the
arithmetic).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import pathlib
import platform
import sys
import time

import jax
import numpy as np

from specsample import files
from specsample.bench.costs import interleaved_step_seconds

CACHE_VARIABLE = "SPECSAMPLE_CACHE_DIR"
CACHE_FILE = "step_costs.json"
CONTEXT = 128  # tokens of the synthetic prompt the steps are timed after
MAX_GAMMA = 6  # r(2) .. r(MAX_GAMMA + 1): larger gammas never paid on a CPU (docs/usage.md)
REPEATS = 7  # interleaved rounds (medians)


@dataclasses.dataclass(frozen=True)
class Costs:
  """A pair's step costs on this machine at one batch size."""

  c: float  # t_draft(1) / t_target(1)
  r: dict[int, float]  # gamma -> t_target(gamma + 1) / t_target(1)
  target_step_ms: float  # t_target(1)
  measured: str  # when (UTC, ISO 8601)
  seconds: float  # what measuring them took, compilation included

  def to_json(self) -> dict:
    return {**dataclasses.asdict(self), "r": {str(g): r for g, r in self.r.items()}}

  @classmethod
  def from_json(cls, record: dict) -> Costs:
    r = {int(g): float(value) for g, value in record["r"].items()}
    if not r or min(r) != 1 or any(value <= 0 for value in r.values()) or record["c"] <= 0:
      raise ValueError("not a step-cost record")
    return cls(
      c=float(record["c"]), r=r, target_step_ms=float(record["target_step_ms"]),
      measured=str(record["measured"]), seconds=float(record["seconds"]),
    )  # fmt: skip


def machine_id() -> str:
  """The CPU model, the kernels' instruction sets and build, the core count and jax's
  version (or the accelerator's kind)."""
  device = jax.devices()[0]
  if device.platform != "cpu":
    return f"{device.platform}:{device.device_kind}:{jax.device_count()}|jax {jax.__version__}"
  from specsample.kernels import native

  model = platform.processor() or platform.machine()
  try:
    with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as info:
      names = [line.split(":", 1)[1].strip() for line in info if line.startswith("model name")]
    model = names[0] if names else model
  except OSError:
    pass
  isa = native.instruction_set() if native.kernel_available() else None
  integer = native.integer_instruction_set() if isa else None
  build = f"kernels {native.build_id()}" if isa else "no kernels"
  cores = f"{os.cpu_count()} cores"
  return f"{model}|{isa or 'xla'}/{integer or '-'}|{build}|{cores}|jax {jax.__version__}"


def cache_path() -> pathlib.Path:
  """The file the costs are kept in."""
  if os.environ.get(CACHE_VARIABLE):
    root = pathlib.Path(os.environ[CACHE_VARIABLE])
  elif os.environ.get("XDG_CACHE_HOME"):
    root = pathlib.Path(os.environ["XDG_CACHE_HOME"]) / "specsample"
  else:
    root = pathlib.Path.home() / ".cache" / "specsample"
  return root / CACHE_FILE


def measure_costs(
  target, draft, batch: int, *, max_gamma: int = MAX_GAMMA, repeats: int = REPEATS
) -> Costs:
  """Times t_target(1..max_gamma + 1) and t_draft(1) side by side on `batch` rows of a
  synthetic CONTEXT-token prompt (random ids: the costs do not depend on the text)."""
  started = time.perf_counter()
  rng = np.random.default_rng(0)
  vocab = min(target.vocab_size, draft.vocab_size)
  prompts = jax.numpy.asarray(rng.integers(3, vocab, (batch, CONTEXT)), jax.numpy.int32)
  lengths = jax.numpy.full((batch,), CONTEXT, jax.numpy.int32)
  gammas = range(1, max_gamma + 1)
  one, draft_one, *verify = interleaved_step_seconds(
    [(target, 1), (draft, 1), *((target, g + 1) for g in gammas)],
    prompts,
    prompt_lengths=lengths,
    cache_length=max_gamma + 2,
    repeats=repeats,
  )
  return Costs(
    c=draft_one / one,
    r={g: seconds / one for g, seconds in zip(gammas, verify, strict=True)},
    target_step_ms=1e3 * one,
    measured=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    seconds=time.perf_counter() - started,
  )


def _key(pair_id: str, batch: int) -> str:
  return f"{machine_id()} || {pair_id} || batch {batch}"


def _read(path: pathlib.Path) -> dict:
  """The cache's records by key ({} when there is none; a damaged file is said and
  ignored: it is rewritten whole at the next measurement)."""
  try:
    records = json.loads(path.read_text(encoding="utf-8"))
  except FileNotFoundError:
    return {}
  except (OSError, ValueError) as error:
    print(f"step costs: ignoring {path} ({error}); measuring again", file=sys.stderr)
    return {}
  return records if isinstance(records, dict) else {}


def _write(path: pathlib.Path, records: dict) -> None:
  """The whole file, whole or not at all (specsample.files: a failed write, a full disk,
  leaves the old file as it was)."""
  path.parent.mkdir(parents=True, exist_ok=True)
  with files.replacing(path) as temporary, open(temporary, "w", encoding="utf-8") as out:
    json.dump(records, out, indent=1, sort_keys=True)


def calibrated_costs(
  target,
  draft,
  *,
  pair_id: str,
  batch: int,
  recalibrate: bool = False,
  max_gamma: int = MAX_GAMMA,
) -> tuple[Costs, bool]:
  """(the pair's costs at this batch size on this machine, whether they came from the
  cache). Measured (and kept) where the cache has none, or with `recalibrate`. A cache that
  cannot be written is said on stderr; the measured costs are still returned."""
  path = cache_path()
  key = _key(pair_id, batch)
  records = _read(path)
  if not recalibrate and key in records:
    try:
      costs = Costs.from_json(records[key])
      if max(costs.r) >= max_gamma:
        return costs, True
    except (KeyError, TypeError, ValueError):
      pass  # an old or damaged record: measured again below
  costs = measure_costs(target, draft, batch, max_gamma=max_gamma)
  records = _read(path)  # another process may have added records meanwhile
  records[key] = costs.to_json()
  try:
    _write(path, records)
  except OSError as error:
    print(f"step costs: could not keep them in {path} ({error})", file=sys.stderr)
  return costs, False
