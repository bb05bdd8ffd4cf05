"""Weight traffic per token and the fraction of this machine's rooflines each decoder reaches.

A decoding call reads its weights once whatever its number of token rows (the model's
`weights_per_call()`: count and bytes), and does 2 x count floating-point operations per
row. Two roofs, measured here in the same run:
  bandwidth  bytes/s of a one-row product streaming a float32 matrix much larger than the
             caches (`kernels.small_k.matmul`, the models' path: the small-k kernel on a
             CPU, XLA's product elsewhere)
  arithmetic float32 operations/s of a large square product (XLA's; a practical peak,
             below the cores' nominal one); for a model with 8-bit activations
             (`kernels.int8_blocks`), operations/s of that kernel over 64 rows of a
             Q8_0 matrix that stays in the caches (its integer products' peak here)
A call of k rows cannot be faster than its floor max(bytes / bandwidth, 2 count k /
arithmetic); a decoder at its floors would have r(k) = floor(k) / floor(1) (a reference,
not a bound: a one-row call above its floor can make the measured r smaller). Per
generated token, autoregressive decoding reads the target's weights once; speculative
decoding reads them once per iteration plus the draft's gamma times, over the tokens the
iteration commits. Traffic counts weights only: the caches' reads and the activations are
left out, so measured time above the floors includes them.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from specsample.bench.timing import time_call
from specsample.core.contract import weights_per_call
from specsample.kernels import small_k


@dataclasses.dataclass(frozen=True)
class Roofs:
  bandwidth: float  # bytes / s, weights streamed through a one-row product
  arithmetic: float  # operations / s: a large square product, or the 8-bit kernel's
  arithmetic_kind: str = "float32"  # "float32", "int8" (8-bit activations) or "int8x2"


@dataclasses.dataclass(frozen=True)
class DecoderRoofline:
  """One decoder's time per generated token against its floors (batch 1)."""

  decoder: str  # "autoregressive", "speculative (gamma 3, token)", ...
  temperature: float
  seconds_per_token: float  # measured
  bytes_per_token: float  # weight traffic
  operations_per_token: float  # 2 x multiply-adds
  memory_floor: float  # bytes_per_token / bandwidth, seconds
  arithmetic_floor: float  # operations_per_token / arithmetic, seconds

  @property
  def memory_fraction(self) -> float:
    return self.memory_floor / self.seconds_per_token

  @property
  def arithmetic_fraction(self) -> float:
    return self.arithmetic_floor / self.seconds_per_token


@jax.jit
def _stream(x: jax.Array, w: jax.Array) -> jax.Array:
  return small_k.matmul(x, w)  # [1, d] x [d, n] -> [1, n]


@jax.jit
def _square(a: jax.Array, b: jax.Array) -> jax.Array:
  return a @ b


def _int8_arithmetic(repeats: int) -> float:
  """Operations / s of the 8-bit-activation kernel: 64 rows times a [2048, 1024] Q8_0
  matrix (2.1 MB: it stays in the caches)."""
  import gguf
  import numpy as np

  from specsample.kernels import int8_blocks

  rng = np.random.default_rng(0)
  weights = rng.standard_normal((2048, 1024)).astype(np.float32)
  matrix = int8_blocks.from_gguf_blocks(
    gguf.quants.quantize(weights, gguf.GGMLQuantizationType.Q8_0), "q8_0"
  )
  x = jnp.asarray(rng.standard_normal((64, 1024)), jnp.float32)
  product = jax.jit(int8_blocks.matmul)
  timing, _ = time_call(lambda: jax.block_until_ready(product(x, matrix)), repeats=repeats)
  return 2 * 2048 * 1024 * 64 / timing.median


def measure_roofs(
  *, megabytes: int = 256, size: int = 2048, repeats: int = 7, activations: str = "float32"
) -> Roofs:
  """Bandwidth from one-row products over a float32 matrix of `megabytes`, arithmetic from
  [size, size] x [size, size] float32 products, or with activations="int8" from the 8-bit
  kernel ("int8x2": half of it, each activation row taking two rows of integer products;
  medians of `repeats` timed calls)."""
  d = 4096
  n = max(1, megabytes * 2**20 // (4 * d))
  key_x, key_w, key_a, key_b = jax.random.split(jax.random.key(0), 4)
  x = jax.random.normal(key_x, (1, d), jnp.float32)
  w = jax.random.normal(key_w, (d, n), jnp.float32)
  stream, _ = time_call(lambda: jax.block_until_ready(_stream(x, w)), repeats=repeats)
  a = jax.random.normal(key_a, (size, size), jnp.float32)
  b = jax.random.normal(key_b, (size, size), jnp.float32)
  square, _ = time_call(lambda: jax.block_until_ready(_square(a, b)), repeats=repeats)
  bandwidth = 4 * d * n / stream.median
  if activations in ("int8", "int8x2"):
    passes = 2 if activations == "int8x2" else 1
    arithmetic = _int8_arithmetic(repeats) / passes
    return Roofs(bandwidth=bandwidth, arithmetic=arithmetic, arithmetic_kind=activations)
  return Roofs(bandwidth=bandwidth, arithmetic=2 * size**3 / square.median)


def has_weights_per_call(model) -> bool:
  """Whether the model says which weights a call reads (`core.contract.WeightTraffic`; a
  wrapper, such as a lookup in front of a draft, does only when what it wraps does)."""
  return weights_per_call(model) is not None


def call_floor(count: int, nbytes: int, rows: int, roofs: Roofs) -> float:
  """Seconds a call of `rows` token rows takes at least: max(memory, arithmetic)."""
  return max(nbytes / roofs.bandwidth, 2.0 * count * rows / roofs.arithmetic)


def call_floors(model, ks, roofs: Roofs) -> dict[int, float]:
  """{k: the floor (seconds) of a call of the model over k token rows}."""
  count, nbytes = model.weights_per_call()
  return {k: call_floor(count, nbytes, k, roofs) for k in ks}


def decoder_roofline(
  decoder: str,
  temperature: float,
  seconds_per_token: float,
  target,
  draft=None,
  *,
  gamma: int = 0,
  tokens_per_target_call: float = 1.0,
  roofs: Roofs,
) -> DecoderRoofline:
  """Traffic, operations and floors per token of a decoder: autoregressive (no draft) or
  speculative (gamma draft calls and one gamma + 1 row target call per iteration)."""
  target_count, target_bytes = target.weights_per_call()
  draft_count, draft_bytes = draft.weights_per_call() if draft is not None else (0, 0)
  per_iteration_bytes = target_bytes + gamma * draft_bytes
  per_iteration_ops = 2.0 * (target_count * (gamma + 1) + draft_count * gamma)
  bytes_per_token = per_iteration_bytes / tokens_per_target_call
  ops_per_token = per_iteration_ops / tokens_per_target_call
  return DecoderRoofline(
    decoder=decoder,
    temperature=temperature,
    seconds_per_token=seconds_per_token,
    bytes_per_token=bytes_per_token,
    operations_per_token=ops_per_token,
    memory_floor=bytes_per_token / roofs.bandwidth,
    arithmetic_floor=ops_per_token / roofs.arithmetic,
  )
