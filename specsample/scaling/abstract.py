"""Paper-scale speculative programs compiled from shapes alone: no weights in memory.

`compile_from_shapes` builds the target and draft as pytrees of `jax.ShapeDtypeStruct`
(`jax.eval_shape` of their random initialisation: an 11B T5-XXL costs no memory), lowers
the whole speculative `lax.while_loop` for them with abstract prompts, compiles it for
this machine's backend and returns the compile time and XLA's memory analysis next to
`specsample plan`'s estimate of the same decode. On CPU the small-k kernel takes float32
products only, so a bfloat16 program is XLA's products, as on TPU/GPU.
"""

from __future__ import annotations

import dataclasses
import time

import jax
import jax.numpy as jnp

from specsample.core.sampling import SamplingConfig
from specsample.decoding import SpeculativeSettings, speculative_program
from specsample.models.decoder_only import DecoderOnly, DecoderOnlyConfig
from specsample.models.t5 import T5
from specsample.models.t5.config import T5Config
from specsample.scaling.plan import DecodeShape, plan


def abstract_model(config: T5Config | DecoderOnlyConfig, dtype: str):
  """The model with every parameter a ShapeDtypeStruct of `dtype` (nothing allocated)."""
  config = config.replace(dtype=dtype)
  cls = T5 if isinstance(config, T5Config) else DecoderOnly
  return jax.eval_shape(lambda: cls.init_random(config, seed=0))


@dataclasses.dataclass(frozen=True)
class CompiledProgram:
  """One compiled speculative program and what XLA says it needs."""

  target_parameters: int
  draft_parameters: int
  shape: DecodeShape
  lower_seconds: float
  compile_seconds: float
  argument_bytes: int  # parameters, prompts, key: what the caller passes in
  output_bytes: int
  temp_bytes: int  # XLA's scratch: caches, the loop state, activations
  generated_code_bytes: int
  plan_bytes: int  # specsample plan's estimate for the same decode (one device)
  backend: str

  @property
  def xla_bytes(self) -> int:
    """Arguments + outputs + temporaries: XLA's peak for the program on one device."""
    return self.argument_bytes + self.output_bytes + self.temp_bytes

  def as_dict(self) -> dict:
    record = dataclasses.asdict(self)
    record["shape"] = dataclasses.asdict(self.shape)
    record["xla_bytes"] = self.xla_bytes
    return record


def _count(model) -> int:
  return sum(leaf.size for leaf in jax.tree_util.tree_leaves(model))


def compile_from_shapes(
  target_config: T5Config | DecoderOnlyConfig,
  draft_config: T5Config | DecoderOnlyConfig,
  shape: DecodeShape,
  *,
  sampling: SamplingConfig | None = None,
  rule: str = "token",
) -> CompiledProgram:
  """Lowers and compiles `speculative_generate`'s program for these shapes (batch,
  input length, new tokens, gamma, dtype) on the default backend."""
  sampling = sampling or SamplingConfig(temperature=1.0)
  target = abstract_model(target_config, shape.dtype)
  draft = abstract_model(draft_config, shape.dtype)
  prompts = jax.ShapeDtypeStruct((shape.batch, shape.input_length), jnp.int32)
  lengths = jax.ShapeDtypeStruct((shape.batch,), jnp.int32)
  key = jax.eval_shape(lambda: jax.random.key(0))
  settings = SpeculativeSettings(
    gamma=shape.gamma,
    max_new_tokens=shape.max_new_tokens,
    sampling=sampling,
    rule="greedy" if sampling.is_greedy else rule,
  )
  start = time.perf_counter()
  lowered = speculative_program.lower(target, draft, prompts, lengths, key, settings)
  lowered_at = time.perf_counter()
  compiled = lowered.compile()
  compiled_at = time.perf_counter()
  memory = compiled.memory_analysis()
  estimate = plan(target_config, draft_config, {"data": 1, "model": 1}, shape)
  return CompiledProgram(
    target_parameters=_count(target),
    draft_parameters=_count(draft),
    shape=shape,
    lower_seconds=lowered_at - start,
    compile_seconds=compiled_at - lowered_at,
    argument_bytes=int(memory.argument_size_in_bytes),
    output_bytes=int(memory.output_size_in_bytes),
    temp_bytes=int(memory.temp_size_in_bytes),
    generated_code_bytes=int(memory.generated_code_size_in_bytes),
    plan_bytes=int(estimate.total_bytes),
    backend=jax.default_backend(),
  )
