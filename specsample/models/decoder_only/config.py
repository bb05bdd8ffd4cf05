"""`DecoderOnlyConfig`: the static description of a decoder-only transformer.

One config covers the Llama family and its relatives as Hugging Face builds them:
Llama 2/3/3.x (rope scaling), SmolLM, Mistral (sliding-window attention), Qwen2 (q/k/v
biases), Qwen3 (RMSNorm on each head's queries and keys) and, with its `GemmaLayers` options,
Gemma 3's text model. It is frozen and hashable (static in compiled programs); rope
settings are stored as tuples for that reason.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np

ROPE_TYPES = ("default", "linear", "llama3")


@dataclasses.dataclass(frozen=True)
class GemmaLayers:
  """Gemma 2/3's layers, where they differ from Llama's: every RMSNorm multiplies by
  (1 + scale), the input embeddings are multiplied by sqrt(d_model), norms follow the
  attention and the MLP, the MLP is gated by tanh-approximated GELU (GeGLU, not SwiGLU),
  and the attention logits are scaled by query_pre_attn_scalar^-0.5 (None: head_dim^-0.5).

  The `local_layers` (indices) attend only to the last `local_window` positions (by
  position: tree slots by their depth) and rotate with `local_rope_theta` (plain rotary
  frequencies, no scaling; None: the global layers' frequencies). The other layers are
  global (causal over everything).
  """

  query_pre_attn_scalar: float | None = None
  local_layers: tuple[int, ...] = ()
  local_window: int | None = None
  local_rope_theta: float | None = None

  def __post_init__(self):
    object.__setattr__(self, "local_layers", tuple(int(i) for i in self.local_layers))
    if self.local_layers and (self.local_window is None or self.local_window < 1):
      raise ValueError(f"local_layers need local_window >= 1, got {self.local_window}")

  def replace(self, **changes) -> GemmaLayers:
    return dataclasses.replace(self, **changes)


@dataclasses.dataclass(frozen=True)
class DecoderOnlyConfig:
  vocab_size: int = 32000
  d_model: int = 768
  num_heads: int = 12
  num_kv_heads: int = 12  # < num_heads: grouped-query attention
  head_dim: int = 64
  mlp_dim: int = 2048
  num_layers: int = 12
  rope_theta: float = 10000.0
  # ("linear", (("factor", 2.0),)) or ("llama3", (("factor", 8.0), ("low_freq_factor", ...)));
  # None: plain rotary embeddings.
  rope_scaling: tuple[str, tuple[tuple[str, float], ...]] | None = None
  # Per-frequency divisors of the rotary frequencies [head_dim // 2] (GGUF's rope_freqs).
  rope_frequency_factors: tuple[float, ...] | None = None
  layer_norm_epsilon: float = 1e-5
  tie_word_embeddings: bool = False
  # A reduced output layer (drafts): logits for only this many tokens, whose ids are the
  # parameter `output_ids` [output_vocab_size]; every other token gets -inf (probability 0,
  # which speculative decoding's verification keeps exact). None: the full vocabulary.
  output_vocab_size: int | None = None
  qkv_bias: bool = False  # Qwen2; Llama's attention_bias sets it and out_bias
  out_bias: bool = False
  mlp_bias: bool = False
  qk_norm: bool = False  # Qwen3: RMSNorm over head_dim on queries and keys, before rotary
  sliding_window: int | None = None  # Mistral v0.1: attend to the last `window` positions
  gemma: GemmaLayers | None = None  # Gemma's layers; None: Llama's
  # Feature-level drafts (EAGLE-3's fusion of low, middle and high layers): the layers
  # (indices) whose outputs (the residual stream after them) join the final-normed hidden
  # state in the features the model gives (a target) or reads (a feature draft), which are
  # then [d_model * (len + 1)]: those outputs in this order, the final-normed state last.
  feature_layers: tuple[int, ...] = ()
  eos_id: int | tuple[int, ...] | None = 2  # a tuple: each of these ends a sequence
  pad_id: int = 0
  dtype: str = "float32"
  # The key/value caches' numbers: "bfloat16" halves what attention reads (widened to
  # float32 as read on CPU); None: `dtype`.
  cache_dtype: str | None = None

  def __post_init__(self):
    if self.cache_dtype not in (None, "float32", "bfloat16"):
      raise ValueError(
        f"cache_dtype must be 'float32', 'bfloat16' or None, got {self.cache_dtype!r}"
      )
    if self.num_heads % self.num_kv_heads:
      raise ValueError(
        f"num_heads ({self.num_heads}) must be a multiple of num_kv_heads ({self.num_kv_heads})"
      )
    if self.head_dim % 2:
      raise ValueError(f"head_dim must be even for rotary embeddings, got {self.head_dim}")
    if self.rope_scaling is not None and self.rope_scaling[0] not in ROPE_TYPES:
      raise ValueError(
        f"rope scaling {self.rope_scaling[0]!r} is not supported (supported: {ROPE_TYPES})"
      )
    factors = self.rope_frequency_factors
    if factors is not None and len(factors) != self.head_dim // 2:
      raise ValueError(
        f"rope_frequency_factors needs head_dim / 2 = {self.head_dim // 2} values, "
        f"got {len(factors)}"
      )
    if self.output_vocab_size is not None:
      if not 1 <= self.output_vocab_size <= self.vocab_size:
        raise ValueError(
          f"output_vocab_size must be in 1..vocab_size={self.vocab_size}, "
          f"got {self.output_vocab_size}"
        )
      if self.tie_word_embeddings:
        raise ValueError("a reduced output layer (output_vocab_size) cannot be tied")
    if self.sliding_window is not None and self.sliding_window < 1:
      raise ValueError(f"sliding_window must be >= 1 or None, got {self.sliding_window}")
    if any(not 0 <= i < self.num_layers for i in self.local_layers):
      raise ValueError(f"local_layers {self.local_layers} outside 0..{self.num_layers - 1}")
    object.__setattr__(self, "feature_layers", tuple(int(i) for i in self.feature_layers))
    if list(self.feature_layers) != sorted(set(self.feature_layers)) or any(
      i < 0 for i in self.feature_layers
    ):  # a draft's are its target's layers: the target checks they exist
      raise ValueError(f"feature_layers must be increasing indices, got {self.feature_layers}")
    if isinstance(self.eos_id, list | tuple):
      object.__setattr__(self, "eos_id", tuple(int(e) for e in self.eos_id) or None)
    eos = self.eos_id if isinstance(self.eos_id, tuple) else (self.eos_id,)
    for name, value in [*(("eos_id", e) for e in eos), ("pad_id", self.pad_id)]:
      if value is not None and not 0 <= value < self.vocab_size:
        raise ValueError(f"{name}={value} is outside the vocabulary of size {self.vocab_size}")

  def replace(self, **changes) -> DecoderOnlyConfig:
    return dataclasses.replace(self, **changes)

  @property
  def eos_ids(self) -> tuple[int, ...]:
    """Every id that ends a sequence (empty when none does)."""
    if self.eos_id is None:
      return ()
    return self.eos_id if isinstance(self.eos_id, tuple) else (self.eos_id,)

  @property
  def num_parameters(self) -> int:
    d, q, kv = self.d_model, self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
    block = d * q + 2 * d * kv + q * d + 3 * d * self.mlp_dim + 2 * d
    block += (q + 2 * kv) * self.qkv_bias + d * self.out_bias
    block += (2 * self.mlp_dim + d) * self.mlp_bias + 2 * self.head_dim * self.qk_norm
    block += 2 * d * (self.gemma is not None)  # the post-norms
    if self.output_vocab_size is not None:
      output = self.output_vocab_size * (d + 1)  # the kernel and its token ids
    else:
      output = 0 if self.tie_word_embeddings else self.vocab_size * d
    return self.num_layers * block + d + self.vocab_size * d + output

  @property
  def llama_layers(self) -> bool:
    """Whether the layers are Llama-shaped (not Gemma's): only those may take the fused
    decoder-layer kernel (kernels.decoder_layer)."""
    return self.gemma is None

  @property
  def local_layers(self) -> tuple[int, ...]:
    """The layers (indices) of a sliding window of their own (`GemmaLayers`); () if none."""
    return self.gemma.local_layers if self.gemma is not None else ()

  @property
  def attention_scale(self) -> float:
    """The factor of the attention logits: query_pre_attn_scalar^-0.5 or head_dim^-0.5."""
    scalar = self.gemma.query_pre_attn_scalar if self.gemma is not None else None
    return (float(scalar) if scalar is not None else self.head_dim) ** -0.5

  @property
  def feature_size(self) -> int:
    """The width of the features (module doc of `feature_layers`)."""
    return self.d_model * (len(self.feature_layers) + 1)

  def is_local(self, layer: int) -> bool:
    """Whether `layer` is a local (sliding-window) layer of a Gemma-style model."""
    return layer in self.local_layers

  @property
  def mlp_hidden_width(self) -> int:
    """Hidden units an MLP pass holds at once (gate and up)."""
    return 2 * self.mlp_dim

  def cache_arrays(self, input_length: int, capacity: int) -> list[tuple[int, int, int]]:
    """(arrays, positions, heads) of the decoding caches: keys and values per layer over
    the prompt and `capacity` new positions. For memory plans (scaling.plan)."""
    return [(2 * self.num_layers, input_length + capacity, self.num_kv_heads)]

  def rotary_frequencies(self) -> np.ndarray:
    """float32[head_dim // 2]: the rotary embedding's angular frequencies."""
    return _rotary_frequencies(self.head_dim, self.rope_theta, self.rope_scaling,
                               self.rope_frequency_factors)  # fmt: skip

  def layer_rotary_frequencies(self, layer: int) -> np.ndarray:
    """float32[head_dim // 2]: layer `layer`'s rotary frequencies (local layers: plain
    frequencies of local_rope_theta where it is set)."""
    if self.is_local(layer) and self.gemma.local_rope_theta is not None:
      return _rotary_frequencies(self.head_dim, self.gemma.local_rope_theta, None, None)
    return self.rotary_frequencies()


@functools.lru_cache(maxsize=64)
def _rotary_frequencies(head_dim, theta, scaling, factors) -> np.ndarray:
  exponents = np.arange(0, head_dim, 2, dtype=np.float32) / np.float32(head_dim)
  inverse = (1.0 / np.power(np.float32(theta), exponents)).astype(np.float32)  # [half]
  if factors is not None:
    inverse = inverse / np.asarray(factors, np.float32)
  if scaling is None:
    return inverse
  kind, settings = scaling[0], dict(scaling[1])
  if kind == "linear":  # positions divided by the factor
    return (inverse / np.float32(settings["factor"])).astype(np.float32)
  if kind == "llama3":  # Llama 3.1: long wavelengths slowed by `factor`, a smooth band between
    factor = settings["factor"]
    low, high = settings["low_freq_factor"], settings["high_freq_factor"]
    context = settings["original_max_position_embeddings"]
    wavelength = 2 * math.pi / inverse
    slowed = np.where(wavelength > context / low, inverse / factor, inverse)
    blend = (context / wavelength - low) / (high - low)
    smoothed = (1 - blend) * slowed / factor + blend * slowed
    medium = (wavelength >= context / high) & (wavelength <= context / low)
    return np.where(medium, smoothed, slowed).astype(np.float32)
  return inverse


# fmt: off
PRESETS = {  # one row per shape, as gpt-fast's transformer_configs
  "llama-134m": DecoderOnlyConfig(),  # 12 layers, d 768: ~134M parameters (untied)
  "llama-20m": DecoderOnlyConfig(
    d_model=256, num_heads=4, num_kv_heads=4, mlp_dim=768, num_layers=6, vocab_size=16000
  ),
  # SmolLM2-135M's shape (the real weights: specsample.load_model of its GGUF or directory).
  "smollm2-135m": DecoderOnlyConfig(
    vocab_size=49152, d_model=576, num_heads=9, num_kv_heads=3, head_dim=64, mlp_dim=1536,
    num_layers=30, rope_theta=100000.0, tie_word_embeddings=True, eos_id=2, pad_id=2,
  ),
  # Llama 3 8B and Llama 3.2 1B shapes, for memory plans and compile checks.
  "llama3-8b": DecoderOnlyConfig(
    vocab_size=128256, d_model=4096, num_heads=32, num_kv_heads=8, head_dim=128,
    mlp_dim=14336, num_layers=32, rope_theta=500000.0, eos_id=128009, pad_id=128009,
  ),
  "llama3-1b": DecoderOnlyConfig(
    vocab_size=128256, d_model=2048, num_heads=32, num_kv_heads=8, head_dim=64, mlp_dim=8192,
    num_layers=16, rope_theta=500000.0, tie_word_embeddings=True, eos_id=128009, pad_id=128009,
  ),
}
# fmt: on


def preset(name: str) -> DecoderOnlyConfig:
  try:
    return PRESETS[name]
  except KeyError:
    raise ValueError(f"unknown preset {name!r}; known: {sorted(PRESETS)}") from None
