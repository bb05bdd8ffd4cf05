"""T5 architecture settings, named presets, and the Hugging Face `config.json` mapping."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any


@dataclasses.dataclass(frozen=True)
class T5Config:
  """One T5 encoder-decoder (v1.0 or v1.1/Flan); hashable, static under `jit`.

  v1.0 (t5-small ... t5-11b): mlp_activations=("relu",), tie_word_embeddings=True (the
  output projection is the input embedding) and logits scaled by d_model ** -0.5.
  v1.1 / Flan-T5: mlp_activations=("gelu", "linear") (gated GELU, tanh approximation),
  tie_word_embeddings=False (separate `logits_dense`), no rescaling.
  `rescale_logits` defaults to `tie_word_embeddings`; Hugging Face transformers 5 writes
  v1.1 models tied but unscaled (`scale_decoder_outputs: false`), hence the separate flag.
  """

  vocab_size: int = 32128
  d_model: int = 512
  num_heads: int = 8
  head_dim: int = 64
  mlp_dim: int = 2048
  num_encoder_layers: int = 6
  num_decoder_layers: int = 6
  mlp_activations: tuple[str, ...] = ("relu",)
  tie_word_embeddings: bool = True
  rescale_logits: bool | None = None  # None: the same as tie_word_embeddings
  relative_attention_num_buckets: int = 32
  relative_attention_max_distance: int = 128
  layer_norm_epsilon: float = 1e-6
  pad_id: int = 0
  eos_id: int = 1
  decoder_start_id: int = 0
  dtype: str = "float32"  # parameters and activations; logits and softmax are float32

  def __post_init__(self):
    for name in ("vocab_size", "d_model", "num_heads", "head_dim", "mlp_dim"):
      if getattr(self, name) < 1:
        raise ValueError(f"T5Config.{name} must be >= 1, got {getattr(self, name)}")
    if self.num_encoder_layers < 1 or self.num_decoder_layers < 1:
      raise ValueError("T5Config needs at least one encoder and one decoder layer")
    object.__setattr__(self, "mlp_activations", tuple(self.mlp_activations))
    if len(self.mlp_activations) not in (1, 2):
      raise ValueError(
        f"mlp_activations needs 1 (wi) or 2 (wi_0, wi_1) entries: {self.mlp_activations}"
      )
    for activation in self.mlp_activations:
      if activation not in ("relu", "gelu", "linear"):
        raise ValueError(f"unknown MLP activation {activation!r} (relu, gelu, linear)")
    if self.rescale_logits is None:
      object.__setattr__(self, "rescale_logits", self.tie_word_embeddings)
    if self.dtype not in ("float32", "bfloat16"):
      raise ValueError(f"T5Config.dtype must be 'float32' or 'bfloat16', got {self.dtype!r}")

  @property
  def inner_dim(self) -> int:
    return self.num_heads * self.head_dim

  @property
  def family(self) -> str:
    return "t5.1.0" if self.mlp_activations == ("relu",) else "t5.1.1"

  def replace(self, **changes) -> T5Config:
    return dataclasses.replace(self, **changes)

  @property
  def num_parameters(self) -> int:
    """Parameter count implied by the shapes (embedding counted once)."""
    d, inner, mlp = self.d_model, self.inner_dim, self.mlp_dim
    attention = 4 * d * inner
    mlp_params = (len(self.mlp_activations) + 1) * d * mlp
    encoder = self.num_encoder_layers * (attention + mlp_params + 2 * d) + d
    decoder = self.num_decoder_layers * (2 * attention + mlp_params + 3 * d) + d
    relpos = 2 * self.num_heads * self.relative_attention_num_buckets
    embedding = self.vocab_size * d * (1 if self.tie_word_embeddings else 2)
    return encoder + decoder + relpos + embedding

  @property
  def mlp_hidden_width(self) -> int:
    """Hidden units an MLP pass holds at once (wi, or wi_0 and wi_1)."""
    return self.mlp_dim * len(self.mlp_activations)

  def cache_arrays(self, input_length: int, capacity: int) -> list[tuple[int, int, int]]:
    """(arrays, positions, heads) of the decoding state: self-attention keys and values
    per decoder layer over `capacity` positions, and the cross-attention keys and values
    over the encoded input. For memory plans (scaling.plan)."""
    layers, heads = self.num_decoder_layers, self.num_heads
    return [(2 * layers, capacity, heads), (2 * layers, input_length, heads)]


def _sized(family: str, d_model, num_heads, mlp_dim, layers, head_dim=64) -> T5Config:
  """A published size of T5 v1.0 ("1.0") or v1.1 ("1.1")."""
  v11 = family == "1.1"
  return T5Config(
    d_model=d_model,
    num_heads=num_heads,
    head_dim=head_dim,
    mlp_dim=mlp_dim,
    num_encoder_layers=layers,
    num_decoder_layers=layers,
    mlp_activations=("gelu", "linear") if v11 else ("relu",),
    tie_word_embeddings=not v11,
  )


# The published sizes (T5 paper; T5X gin configs; Hugging Face config.json files).
PRESETS: dict[str, T5Config] = {
  "t5-small": _sized("1.0", 512, 8, 2048, 6),
  "t5-base": _sized("1.0", 768, 12, 3072, 12),
  "t5-large": _sized("1.0", 1024, 16, 4096, 24),
  "t5-3b": _sized("1.0", 1024, 32, 16384, 24, head_dim=128),
  "t5-11b": _sized("1.0", 1024, 128, 65536, 24, head_dim=128),
  "t5.1.1-small": _sized("1.1", 512, 6, 1024, 8),
  "t5.1.1-base": _sized("1.1", 768, 12, 2048, 12),
  "t5.1.1-large": _sized("1.1", 1024, 16, 2816, 24),
  "t5.1.1-xl": _sized("1.1", 2048, 32, 5120, 24),
  "t5.1.1-xxl": _sized("1.1", 4096, 64, 10240, 24),
}
for _size in ("small", "base", "large", "xl", "xxl"):
  PRESETS[f"flan-t5-{_size}"] = PRESETS[f"t5.1.1-{_size}"]


def preset(name: str) -> T5Config:
  try:
    return PRESETS[name]
  except KeyError:
    raise ValueError(f"unknown T5 preset {name!r}; known: {sorted(PRESETS)}") from None


def from_hf_config(hf: Mapping[str, Any], dtype: str = "float32") -> T5Config:
  """Builds a T5Config from a Hugging Face T5 `config.json` dictionary."""
  projection = hf.get("feed_forward_proj", "relu")
  activations = {
    "relu": ("relu",),
    "gated-gelu": ("gelu", "linear"),
    "gated-gelu_new": ("gelu", "linear"),
  }.get(projection)
  if activations is None:
    raise ValueError(f"unsupported feed_forward_proj {projection!r} (relu, gated-gelu)")
  tied = bool(hf.get("tie_word_embeddings", True))
  # transformers < 5 scaled exactly the tied models; transformers 5 writes the flag.
  rescale = bool(hf.get("scale_decoder_outputs", tied))
  try:
    return T5Config(
      vocab_size=int(hf["vocab_size"]),
      d_model=int(hf["d_model"]),
      num_heads=int(hf["num_heads"]),
      head_dim=int(hf["d_kv"]),
      mlp_dim=int(hf["d_ff"]),
      num_encoder_layers=int(hf["num_layers"]),
      num_decoder_layers=int(hf.get("num_decoder_layers") or hf["num_layers"]),
      mlp_activations=activations,
      tie_word_embeddings=tied,
      rescale_logits=rescale,
      relative_attention_num_buckets=int(hf.get("relative_attention_num_buckets", 32)),
      relative_attention_max_distance=int(hf.get("relative_attention_max_distance", 128)),
      layer_norm_epsilon=float(hf.get("layer_norm_epsilon", 1e-6)),
      pad_id=int(hf.get("pad_token_id", 0) or 0),
      eos_id=int(hf.get("eos_token_id", 1) if hf.get("eos_token_id") is not None else 1),
      decoder_start_id=int(hf.get("decoder_start_token_id", 0) or 0),
      dtype=dtype,
    )
  except KeyError as missing:
    raise ValueError(f"T5 config.json lacks the field {missing}") from None


def to_hf_config(config: T5Config) -> dict[str, Any]:
  """The Hugging Face `config.json` fields describing `config`."""
  return {
    "architectures": ["T5ForConditionalGeneration"],
    "model_type": "t5",
    "vocab_size": config.vocab_size,
    "d_model": config.d_model,
    "d_kv": config.head_dim,
    "d_ff": config.mlp_dim,
    "num_layers": config.num_encoder_layers,
    "num_decoder_layers": config.num_decoder_layers,
    "num_heads": config.num_heads,
    "relative_attention_num_buckets": config.relative_attention_num_buckets,
    "relative_attention_max_distance": config.relative_attention_max_distance,
    "layer_norm_epsilon": config.layer_norm_epsilon,
    "feed_forward_proj": "relu" if config.mlp_activations == ("relu",) else "gated-gelu",
    "tie_word_embeddings": config.tie_word_embeddings,
    "scale_decoder_outputs": config.rescale_logits,
    "pad_token_id": config.pad_id,
    "eos_token_id": config.eos_id,
    "decoder_start_token_id": config.decoder_start_id,
    "dropout_rate": 0.0,
    "is_encoder_decoder": True,
  }
