"""Memory planning before anything is loaded: bytes per device of a target/draft pair.

Parameter shapes come from each network's `parameter_shapes(config)` (`jax.eval_shape` of
the model's initialisation: no arrays are allocated, so t5-11b plans in a second), cut by
the partitioning rules of `specsample.scaling.rules` on the given mesh. Caches are exact
sizes of the decoding state; activations are an estimate of the largest transient buffers
(one layer's worth, as XLA reuses buffers across layers), stated as such.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

import jax.numpy as jnp

from specsample.models.decoder_only import DecoderOnlyConfig
from specsample.models.decoder_only import network as decoder_only_network
from specsample.models.t5 import T5Config
from specsample.models.t5 import network as t5_network
from specsample.scaling.rules import (
  CACHE_AXES,
  DEFAULT_RULES,
  param_logical_axes,
  partition_spec,
  shard_count,
)

GiB = 1024**3

# Memory per chip / GPU, bytes.
ACCELERATORS: dict[str, int] = {
  "tpu-v4": 32 * GiB,
  "tpu-v5e": 16 * GiB,
  "tpu-v5p": 95 * GiB,
  "tpu-v6e": 32 * GiB,
  "a100-40gb": 40 * GiB,
  "a100-80gb": 80 * GiB,
  "h100": 80 * GiB,
  "h200": 141 * GiB,
}


@dataclasses.dataclass(frozen=True)
class DecodeShape:
  batch: int
  input_length: int  # encoder input (T5) or prompt (decoder-only) tokens
  max_new_tokens: int
  gamma: int = 4
  dtype: str = "bfloat16"

  def __post_init__(self):
    for name in ("batch", "input_length", "max_new_tokens", "gamma"):
      if getattr(self, name) < 1:
        raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
    if self.dtype not in ("float32", "bfloat16", "float16"):
      raise ValueError(f"dtype must be float32, bfloat16 or float16, got {self.dtype!r}")

  @property
  def itemsize(self) -> int:
    return jnp.dtype(self.dtype).itemsize


@dataclasses.dataclass(frozen=True)
class ModelPlan:
  role: str
  parameters: int
  parameter_bytes: int  # per device
  cache_bytes: int  # per device
  activation_bytes: int  # per device, estimate

  @property
  def total_bytes(self) -> int:
    return self.parameter_bytes + self.cache_bytes + self.activation_bytes


@dataclasses.dataclass(frozen=True)
class MemoryPlan:
  mesh: dict[str, int]
  shape: DecodeShape
  models: tuple[ModelPlan, ...]
  loop_bytes: int  # per device: output buffer and the draft's gamma distributions

  @property
  def total_bytes(self) -> int:
    return sum(m.total_bytes for m in self.models) + self.loop_bytes

  def fits(self, accelerator: str, *, headroom: float = 0.9) -> bool:
    """Whether the plan fits `headroom` of one device's memory (the rest: XLA, runtime)."""
    if accelerator not in ACCELERATORS:
      raise ValueError(f"unknown accelerator {accelerator!r}; known: {sorted(ACCELERATORS)}")
    return self.total_bytes <= headroom * ACCELERATORS[accelerator]


MAX_DEVICES = 2**16  # more than any machine of accelerators built (a TPU v5p pod: 8,960)


def parse_mesh(text: str | None, device_count: int | None = None) -> dict[str, int]:
  """ "data=2,model=4" -> {"data": 2, "model": 4}; None: all devices on "data". An axis
  named twice, sizes below 1 and meshes past MAX_DEVICES are refused."""
  if not text:
    return {"data": device_count or 1, "model": 1}
  mesh = {}
  for part in text.split(","):
    name, _, value = part.partition("=")
    name = name.strip()
    if name not in ("data", "model") or not value.strip().isdigit():
      raise ValueError(f'mesh must look like "data=2,model=4", got {text!r}')
    if name in mesh:
      raise ValueError(f"mesh {text!r} names the {name} axis twice")
    mesh[name] = int(value)
  mesh = {"data": mesh.get("data", 1), "model": mesh.get("model", 1)}
  if min(mesh.values()) < 1:
    raise ValueError(f"mesh axis sizes must be >= 1, got {text!r}")
  if math.prod(mesh.values()) > MAX_DEVICES:
    raise ValueError(
      f"mesh {text!r} has {math.prod(mesh.values()):,} devices; at most {MAX_DEVICES:,}"
    )
  if device_count is not None and math.prod(mesh.values()) != device_count:
    raise ValueError(f"mesh {mesh} needs {math.prod(mesh.values())} devices, have {device_count}")
  return mesh


def unsplit_fraction(shapes: Mapping[str, tuple[int, ...]], mesh: Mapping[str, int]) -> float:
  """The fraction of parameters (by count) that the "model" axis leaves whole on every
  device although the rules would split them, because it does not divide their dimension
  (e.g. 4 heads on model=3). shapes: {"decoder/layers_0/...": dims}. 0 when model=1."""
  if mesh.get("model", 1) == 1:
    return 0.0
  total = unsplit = 0
  for name, dims in shapes.items():
    axes = param_logical_axes(name, len(dims))
    wants_model = any(dict(DEFAULT_RULES).get(axis) == "model" for axis in axes)
    spec = partition_spec(axes, dims, mesh)
    total += math.prod(dims)
    unsplit += math.prod(dims) if wants_model and "model" not in tuple(spec) else 0
  return unsplit / max(total, 1)


def plan_warnings(
  target, draft, mesh: Mapping[str, int], shape: DecodeShape, draft_mesh=None
) -> list[str]:
  """What a plan should say besides its bytes: a data axis the batch does not fill or
  divide (rows of padding), a model axis that leaves a model's parameters whole."""
  warnings = []
  data = mesh.get("data", 1)
  if shape.batch % data:
    padded = math.ceil(shape.batch / data) * data
    warnings.append(
      f"batch {shape.batch} over data={data}: padded to {padded} rows "
      f"({padded - shape.batch} of padding; a batch that data={data} divides wastes none)"
    )
  for role, config, model_mesh in (("target", target, mesh), ("draft", draft, draft_mesh or mesh)):
    if config is None:
      continue
    fraction = unsplit_fraction(parameter_shapes(config), model_mesh)
    if fraction > 0:
      warnings.append(
        f"model={model_mesh['model']} does not divide the {role}'s heads / MLP / vocabulary "
        f"dimensions holding {fraction:.0%} of its parameters: those stay whole on every device"
      )
  return warnings


def parameter_shapes(config) -> dict[str, tuple[int, ...]]:
  """{"decoder/layers_0/mlp/wo/kernel": shape, ...} of a model config, without allocating
  (each network's own `parameter_shapes`: `jax.eval_shape` of its initialisation)."""
  if isinstance(config, T5Config):
    return t5_network.parameter_shapes(config)
  if isinstance(config, DecoderOnlyConfig):
    return decoder_only_network.parameter_shapes(config)
  raise TypeError(f"no network for a {type(config).__name__}")


def plan_model(
  role: str, config: T5Config | DecoderOnlyConfig, mesh: Mapping[str, int], shape: DecodeShape
) -> ModelPlan:
  size = shape.itemsize
  count, per_device = 0, 0
  for path, dims in parameter_shapes(config).items():
    spec = partition_spec(param_logical_axes(path, len(dims)), dims, mesh, DEFAULT_RULES)
    count += math.prod(dims)
    per_device += math.prod(dims) * size // shard_count(spec, mesh)

  capacity = shape.max_new_tokens + shape.gamma + 1  # what the decoding loop allocates
  k = shape.gamma + 1
  cache_arrays = config.cache_arrays(shape.input_length, capacity)
  mlp, vocab = config.mlp_hidden_width, config.vocab_size
  longest = shape.input_length  # the encoder pass (T5) or the prefill (decoder-only)
  cache = 0
  for copies, length, num_heads in cache_arrays:
    dims = (shape.batch, length, num_heads, config.head_dim)
    spec = partition_spec(CACHE_AXES, dims, mesh, DEFAULT_RULES)
    cache += copies * math.prod(dims) * size // shard_count(spec, mesh)

  data, model = mesh.get("data", 1), mesh.get("model", 1)
  rows = math.ceil(shape.batch / data)
  heads_here = math.ceil(config.num_heads / model)
  # One layer of the longest pass: activations, MLP hidden, float32 attention scores.
  prefill = (
    rows
    * longest
    * (4 * config.d_model * size + math.ceil(mlp / model) * size + heads_here * longest * 4)
  )
  # The verify call: k tokens' float32 logits, probabilities and residuals (vocab sharded).
  verify = rows * k * math.ceil(vocab / model) * 4 * 3
  return ModelPlan(
    role=role,
    parameters=count,
    parameter_bytes=per_device,
    cache_bytes=cache,
    activation_bytes=max(prefill, verify),
  )


def plan(
  target: T5Config | DecoderOnlyConfig,
  draft: T5Config | DecoderOnlyConfig | None,
  mesh: Mapping[str, int],
  shape: DecodeShape,
  draft_mesh: Mapping[str, int] | None = None,
) -> MemoryPlan:
  """Bytes per device of the target (and draft) decoding `shape` on `mesh`.

  The draft uses `draft_mesh` (default: the same mesh; {"data": d, "model": 1} keeps it
  replicated across the model axis).
  """
  models = [plan_model("target", target, mesh, shape)]
  if draft is not None:
    models.append(plan_model("draft", draft, draft_mesh or mesh, shape))
  rows = math.ceil(shape.batch / mesh.get("data", 1))
  vocab = target.vocab_size
  loop = rows * (shape.max_new_tokens * 4 + shape.gamma * vocab * 4)
  return MemoryPlan(mesh=dict(mesh), shape=shape, models=tuple(models), loop_bytes=loop)


def format_bytes(count: int) -> str:
  for unit, scale in (("GiB", GiB), ("MiB", 1024**2), ("KiB", 1024)):
    if count >= scale:
      return f"{count / scale:.2f} {unit}"
  return f"{count} B"


def plan_table(memory: MemoryPlan, accelerators=None) -> str:
  """The plan as a markdown table, with a fits / does not fit line per accelerator."""
  s = memory.shape
  lines = [
    f"mesh data={memory.mesh['data']} model={memory.mesh['model']}, batch {s.batch}, "
    f"input {s.input_length}, {s.max_new_tokens} new tokens, gamma {s.gamma}, {s.dtype}",
    "",
    "| per device | parameters | parameter bytes | caches | activations (est.) | total |",
    "|---|---|---|---|---|---|",
  ]
  for m in memory.models:
    lines.append(
      f"| {m.role} | {m.parameters / 1e6:,.1f}M | {format_bytes(m.parameter_bytes)} | "
      f"{format_bytes(m.cache_bytes)} | {format_bytes(m.activation_bytes)} | "
      f"{format_bytes(m.total_bytes)} |"
    )
  lines.append(f"| loop buffers | | | | {format_bytes(memory.loop_bytes)} | |")
  lines.append(f"| **all** | | | | | **{format_bytes(memory.total_bytes)}** |")
  lines.append("")
  for name in accelerators or ACCELERATORS:
    verdict = "fits" if memory.fits(name) else "does NOT fit"
    lines.append(
      f"- {name} ({format_bytes(ACCELERATORS[name])} per device): {verdict} (90% usable)"
    )
  return "\n".join(lines) + "\n"


def resolve_config(name_or_path: str) -> T5Config | DecoderOnlyConfig:
  """A T5 preset ("t5-11b"), a decoder-only preset ("llama-134m") or a Hugging Face
  T5 directory / config.json (read without touching the weights)."""
  import os

  from specsample.models import decoder_only
  from specsample.models.t5 import PRESETS, preset

  if name_or_path in PRESETS:
    return preset(name_or_path)
  if name_or_path in decoder_only.PRESETS:
    return decoder_only.preset(name_or_path)
  directory = name_or_path
  if os.path.basename(name_or_path) == "config.json":
    directory = os.path.dirname(name_or_path) or "."
  if os.path.exists(os.path.join(directory, "config.json")):
    from specsample.checkpoints.huggingface import read_hf_config

    return read_hf_config(directory)
  raise ValueError(
    f"{name_or_path!r} is neither a preset (T5: {sorted(PRESETS)[:3]}..., decoder-only: "
    f"{sorted(decoder_only.PRESETS)}) nor a Hugging Face directory with config.json; for a "
    "T5X checkpoint give its preset name (plan reads no weights)"
  )
