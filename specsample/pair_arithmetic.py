"""The arithmetic a pair runs with: the weight format (`--weights`) and the activations
(`--activations`), and what "auto" resolves to for a target checkpoint on this CPU."""

from __future__ import annotations

from specsample.checkpoints.loader import stored_weight_format

WEIGHTS = ("auto", "float32", "bfloat16", "gguf")
ACTIVATIONS = ("auto", "int8", "int8x2", "float32")


def activations_note(activations: str) -> str:
  from specsample.kernels import native

  isa = native.integer_instruction_set() or "XLA"
  if activations == "int8":
    how = f"8 bits per number in blocks of 32, integer dot products: {isa}"
    other = "--activations float32 for float32 arithmetic"
  elif activations == "int8x2":
    how = (
      "8 bits per number in blocks of 32 and a second 8-bit pass over the rounding error, "
      f"integer dot products: {isa}"
    )
    other = "--activations int8 for one pass"
  else:
    how = "the float32 product of the dequantized weights"
    other = "--activations int8 for integer dot products"
  return f"activations: {activations} ({how}; {other})"


def resolve_weights(weights: str, target_path: str | None, *, dtype: str, sharded: bool) -> str:
  """weights "auto" -> the format the target checkpoint stores (float32 with dtype
  bfloat16, when sharded, or without a checkpoint); other values stay."""
  if weights not in WEIGHTS:
    raise ValueError(f"weights must be one of {WEIGHTS}, got {weights!r}")
  if weights != "auto":
    if weights != "float32" and dtype != "float32":
      raise ValueError(
        f"weights {weights!r} keep the arithmetic in float32: drop dtype {dtype!r} "
        f"(--weights {weights} with --dtype {dtype})"
      )
    return weights
  if target_path is None or dtype != "float32" or sharded:
    return "float32"
  return stored_weight_format(target_path)


def resolve_activations(activations: str, weights: str) -> str:
  """activations "auto" -> "int8" for GGUF blocks where the CPU kernel runs, else
  "float32"; integer activations without blocks are refused."""
  from specsample.kernels import native

  if activations not in ACTIVATIONS:
    raise ValueError(f"activations must be one of {ACTIVATIONS}, got {activations!r}")
  if activations in ("int8", "int8x2") and weights != "gguf":
    raise ValueError(
      f"--activations {activations} multiplies GGUF blocks: it needs --weights gguf (or auto "
      f"on a GGUF file), not --weights {weights}"
    )
  if activations == "auto":
    return "int8" if weights == "gguf" and native.kernel_available() else "float32"
  return activations
