"""Scale-out: partitioning rules over a device mesh and memory planning."""

from specsample.scaling.plan import (
  ACCELERATORS,
  DecodeShape,
  MemoryPlan,
  ModelPlan,
  parse_mesh,
  plan,
  plan_table,
)
from specsample.scaling.rules import DEFAULT_RULES, param_logical_axes, partition_spec

__all__ = [
  "ACCELERATORS",
  "DEFAULT_RULES",
  "DecodeShape",
  "MemoryPlan",
  "ModelPlan",
  "param_logical_axes",
  "parse_mesh",
  "partition_spec",
  "plan",
  "plan_table",
]
