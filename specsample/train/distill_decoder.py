"""On-policy distillation of a decoder-only draft from its target (DistillSpec, Zhou et al.
2023, arXiv 2310.08461): the draft learns the target's own responses to chat prompts
(`specsample.train.target_responses`: its tokens and top-k log-probabilities).

- `choose_output_ids`: the reduced output vocabulary (the K most frequent response tokens,
  special tokens always in) and the share of response tokens it covers;
- `draft_from_target`: a draft initialised from the target: layers the caller picks, its
  final norm, its input embedding (shared, frozen) and the output rows of its tied
  embedding for the kept tokens;
- `distill`: AdamW (warmup + cosine) over jit-compiled steps of `loss`: cross-entropy on the
  target's tokens, optionally mixed with KL from its top-k distribution, masked to the
  response tokens; the input embedding is not trained;
- `agreement`: greedy agreement (the greedy alpha along the target's outputs) and, with
  top-k labels, the overlap sum_x min(p, q) over the target's top-k.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Iterator, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct

from specsample.models.decoder_only import DecoderOnly, DecoderOnlyConfig, DecoderOnlyNetwork
from specsample.models.decoder_only.network import attention_mask, empty_caches
from specsample.train.optim import make_optimizer, run_steps
from specsample.train.target_responses import Response, generate_responses

__all__ = [
  "Batch",
  "DistillSettings",
  "Response",
  "agreement",
  "batches",
  "calibrate_output_scale",
  "choose_output_ids",
  "distill",
  "draft_from_target",
  "generate_responses",
  "index_map",
  "loss",
  "make_batch",
  "output_logits",
]


def choose_output_ids(
  responses: Sequence[Sequence[int]], size: int, *, always: Sequence[int] = ()
) -> tuple[np.ndarray, float]:
  """The `size` most frequent tokens of `responses` (ties by id), with `always` in (EOS,
  the chat template's special tokens). Returns (sorted int32[size] ids, the share of
  response tokens they cover)."""
  counts = np.bincount(np.concatenate([np.asarray(r, np.int64) for r in responses] or [[0]]))
  always = sorted(set(map(int, always)))
  if len(always) > size:
    raise ValueError(f"{len(always)} tokens must always be kept, more than size={size}")
  order = [int(i) for i in np.argsort(-counts, kind="stable") if counts[i] > 0]
  chosen = list(always)
  kept = set(chosen)
  for token in order:
    if len(chosen) >= size:
      break
    if token not in kept:
      chosen.append(token)
      kept.add(token)
  token = 0
  while len(chosen) < size:  # fewer distinct tokens than size: fill with unused ids
    if token not in kept:
      chosen.append(token)
      kept.add(token)
    token += 1
  ids = np.array(sorted(chosen), np.int32)
  covered = counts[ids[ids < len(counts)]].sum() / max(1, counts.sum())
  return ids, float(covered)


def draft_from_target(
  target: DecoderOnly, layers: Sequence[int], output_ids: np.ndarray | None = None
) -> DecoderOnly:
  """A draft made of the target's `layers` (in order), its final norm and input embedding,
  and an output layer: the tied embedding's rows for `output_ids` (a reduced output
  layer), or all of them (untied copy) when None."""
  c = target.config
  params = target.params
  embedding = params["embed"]["embedding"]  # [vocab, d_model]
  if output_ids is None:
    output_ids = np.arange(c.vocab_size, dtype=np.int32)
    size = None
  else:
    size = len(output_ids)
  head = params["lm_head"]["kernel"].T if "lm_head" in params else embedding
  config = c.replace(num_layers=len(layers), tie_word_embeddings=False, output_vocab_size=size)
  new = {
    "embed": {"embedding": embedding},
    "final_norm": params["final_norm"],
    "lm_head": {"kernel": jnp.asarray(head)[jnp.asarray(output_ids)].T},  # [d_model, K]
  }
  for number, layer in enumerate(layers):
    new[f"blocks_{number}"] = params[f"blocks_{layer}"]
  if size is not None:
    new["output_ids"] = jnp.asarray(output_ids, jnp.int32)
  return DecoderOnly(params=new, config=config)


def calibrate_output_scale(
  draft: DecoderOnly, batch: Batch, scales: Sequence[float] = (1.0, 0.5, 0.35, 0.25, 0.18, 0.12)
) -> tuple[DecoderOnly, float]:
  """The draft with its output layer scaled by whichever of `scales` gives the lowest loss on
  `batch`. A few of the target's first layers under its final norm give far too confident
  logits (loss ~15 nats for SmolLM2's layers 0-1, ~7 at scale 0.25): a better start."""
  kernel = draft.params["lm_head"]["kernel"]
  arrays = jax.tree_util.tree_map(jnp.asarray, batch)

  def scaled(scale):
    return {**draft.params, "lm_head": {"kernel": kernel * scale}}

  losses = [float(loss(draft.config, scaled(s), arrays)) for s in scales]
  best = scales[int(np.argmin(losses))]
  return DecoderOnly(params=scaled(best), config=draft.config), best


# ---------------------------------------------------------------- training data


@struct.dataclass
class Batch:
  """Teacher-forced sequences (prompt + response), right-padded.  All [batch, length]."""

  tokens: np.ndarray  # int32: the inputs, sequence[:-1]
  labels: np.ndarray  # int32: the next tokens' indices in the output layer (-1: not kept)
  mask: np.ndarray  # float32: the weight of each label: 1 at response tokens the draft can
  # emit, `prompt_weight` at prompt positions (labels: the target's argmax there), else 0
  soft_ids: np.ndarray  # int32[batch, length, k]: the target's top-k, as output indices (-1)
  soft_probs: np.ndarray  # float32[batch, length, k]: their probabilities (0 where -1)


def index_map(output_ids: np.ndarray, vocab_size: int) -> np.ndarray:
  """int32[vocab]: each token's index in the output layer, -1 for tokens not kept."""
  table = np.full(vocab_size, -1, np.int32)
  table[np.asarray(output_ids)] = np.arange(len(output_ids), dtype=np.int32)
  return table


def make_batch(
  examples: Sequence[Response], table: np.ndarray, multiple: int = 128, prompt_weight: float = 0.0
) -> Batch:
  """A batch of Responses (prompt + response tokens) padded to a multiple of `multiple`.

  With prompt_weight > 0 and the target's prompt-position top-k recorded, the prompt
  positions are trained too (weight prompt_weight), towards the target's predictions."""
  lengths = [len(e.prompt) + len(e.tokens) - 1 for e in examples]
  width = -(-max(lengths) // multiple) * multiple
  k = examples[0].top_ids.shape[1] if examples[0].top_ids.ndim == 2 else 1
  tokens = np.zeros((len(examples), width), np.int32)
  labels = np.full((len(examples), width), -1, np.int32)
  mask = np.zeros((len(examples), width), np.float32)
  soft_ids = np.full((len(examples), width, k), -1, np.int32)
  soft_probs = np.zeros((len(examples), width, k), np.float32)
  for row, e in enumerate(examples):
    sequence = np.asarray(list(e.prompt) + list(e.tokens), np.int32)
    n, start = len(sequence) - 1, len(e.prompt) - 1  # label of position start: response[0]
    tokens[row, :n] = sequence[:-1]
    labels[row, :n] = table[sequence[1:]]
    mask[row, start:n] = labels[row, start:n] >= 0
    if len(e.tokens):
      ids = table[np.asarray(e.top_ids).reshape(len(e.tokens), -1)]
      soft_ids[row, start:n] = ids
      soft_probs[row, start:n] = np.where(ids >= 0, np.exp(e.top_logprobs), 0.0)
    if prompt_weight and e.prompt_top_ids is not None and start > 0:
      ids = table[np.asarray(e.prompt_top_ids)]  # [start, k]
      soft_ids[row, :start] = ids
      soft_probs[row, :start] = np.where(ids >= 0, np.exp(e.prompt_top_logprobs), 0.0)
      labels[row, :start] = ids[:, 0]
      mask[row, :start] = prompt_weight * (ids[:, 0] >= 0)
  return Batch(tokens, labels, mask, soft_ids, soft_probs)


def batches(
  examples: Sequence[Response], table: np.ndarray, batch_size: int, seed: int, pool: int = 20,
  prompt_weight: float = 0.0, start: int = 0,
) -> Iterator[Batch]:  # fmt: skip
  """Endless shuffled batches of similar lengths (pools of `pool` batches sorted by length),
  from training step `start` + 1 on: the batches an uninterrupted run would read after
  step `start` (the order's draws are replayed, the skipped batches not built)."""
  rng = np.random.default_rng(seed)
  lengths = np.array([len(e.prompt) + len(e.tokens) for e in examples])
  skip = start
  while True:
    order = rng.permutation(len(examples))
    groups = []
    for start in range(0, len(order), pool * batch_size):
      chunk = order[start : start + pool * batch_size]
      chunk = chunk[np.argsort(lengths[chunk], kind="stable")]
      groups += [chunk[i : i + batch_size] for i in range(0, len(chunk), batch_size)]
    for number in rng.permutation(len(groups)):
      if skip:
        skip -= 1
        continue
      yield make_batch([examples[i] for i in groups[number]], table, prompt_weight=prompt_weight)


# ---------------------------------------------------------------- loss and training


def _hidden(module: DecoderOnlyNetwork, tokens, positions, caches, end_index):
  """The final-norm hidden states [batch, length, d_model] (no output layer)."""
  allowed = attention_mask(positions, caches[0][0].shape[1], module.config.sliding_window)
  x = module.embed(tokens)
  for block, cache in zip(module.blocks, caches, strict=True):
    x, _ = block(x, positions, cache, end_index, allowed)
  return module.final_norm(x)


def output_logits(config: DecoderOnlyConfig, params, tokens: jax.Array) -> jax.Array:
  """Causal full-sequence logits over the output layer's tokens only.
  tokens int32[batch, length] -> float32[batch, length, output_vocab]."""
  batch, length = tokens.shape
  positions = jnp.broadcast_to(jnp.arange(length, dtype=jnp.int32), (batch, length))
  caches = empty_caches(config, batch, length)
  end_index = jnp.zeros((batch,), jnp.int32)
  hidden = DecoderOnlyNetwork(config).apply(
    {"params": params}, tokens, positions, caches, end_index, method=_hidden
  )
  return jnp.einsum("bld,dv->blv", hidden, params["lm_head"]["kernel"]).astype(jnp.float32)


def loss(config: DecoderOnlyConfig, params, batch: Batch, soft_weight: float = 0.0) -> jax.Array:
  """Mean over the masked (response) positions of (1 - w) * cross-entropy on the target's
  tokens + w * cross-entropy against its top-k probabilities (w = soft_weight)."""
  log_probs = jax.nn.log_softmax(output_logits(config, params, batch.tokens))  # [b, l, K]
  labels = jnp.maximum(batch.labels, 0)
  hard = -jnp.take_along_axis(log_probs, labels[..., None], axis=-1)[..., 0]  # [b, l]
  per_token = hard
  if soft_weight:
    soft_ids = jnp.maximum(batch.soft_ids, 0)
    picked = jnp.take_along_axis(log_probs, soft_ids, axis=-1)  # [b, l, k]
    soft = -jnp.sum(batch.soft_probs * picked, axis=-1)
    per_token = (1 - soft_weight) * hard + soft_weight * soft
  return jnp.sum(per_token * batch.mask) / jnp.maximum(jnp.sum(batch.mask), 1.0)


@dataclasses.dataclass(frozen=True)
class DistillSettings:
  steps: int = 2000
  batch_size: int = 16
  learning_rate: float = 1e-3
  warmup_steps: int = 100
  weight_decay: float = 0.01
  soft_weight: float = 0.5  # share of the top-k soft-label loss (0: hard labels only)
  max_seconds: float | None = None  # stop early when the wall-clock budget is spent
  log_every: int = 50
  seed: int = 0
  final_fraction: float = 0.05  # the learning rate's cosine decays to this share of it


def split_embedding(params) -> tuple[dict, jax.Array]:
  """(trainable parameters, the frozen input embedding)."""
  return {k: v for k, v in params.items() if k != "embed"}, params["embed"]["embedding"]


def distill(
  draft: DecoderOnly,
  next_batch: Callable[[], Batch],
  settings: DistillSettings,
  *,
  opt_state=None,
  start_step: int = 0,
  progress: Callable[[int, float], None] | None = None,
  checkpoint: Callable[[DecoderOnly, object, int], None] | None = None,
  checkpoint_every: int = 200,
) -> tuple[DecoderOnly, object, list[tuple[int, float]]]:
  """Trains every parameter of `draft` but its input embedding (and `output_ids`) for
  `settings.steps` steps (from `start_step`, resuming with `opt_state` and `next_batch`
  giving the batches from step `start_step` + 1: `batches(..., start=start_step)`, which
  goes on as an uninterrupted run would). Returns the draft, the optimizer state and the
  (step, mean loss) log."""
  config = draft.config
  optimizer = make_optimizer(settings)
  trainable, embedding = split_embedding(draft.params)
  output_ids = trainable.pop("output_ids", None)
  # Copies: the step donates its inputs, and the draft's layers may be the target's arrays.
  trainable = jax.tree_util.tree_map(lambda x: jnp.array(x, copy=True), trainable)

  def merged(trainable):  # the embedding and output ids are constants (never differentiated)
    params = {**trainable, "embed": {"embedding": embedding}}
    return params if output_ids is None else {**params, "output_ids": output_ids}

  @functools.partial(jax.jit, donate_argnums=(0, 1))
  def step(trainable, opt_state, batch):
    def objective(trainable):
      return loss(config, merged(trainable), batch, settings.soft_weight)

    value, grads = jax.value_and_grad(objective)(trainable)
    updates, opt_state = optimizer.update(grads, opt_state, trainable)
    return optax.apply_updates(trainable, updates), opt_state, value

  def model(trainable) -> DecoderOnly:
    return DecoderOnly(params=merged(trainable), config=config)

  opt_state = optimizer.init(trainable) if opt_state is None else opt_state
  trainable, opt_state, log = run_steps(
    lambda trainable, opt_state, batch, number: step(trainable, opt_state, batch),
    trainable, opt_state, next_batch, settings, start_step=start_step, progress=progress,
    checkpoint=checkpoint and (lambda t, o, number: checkpoint(model(t), o, number)),
    checkpoint_every=checkpoint_every,
  )  # fmt: skip
  return model(trainable), opt_state, log


# ---------------------------------------------------------------- evaluation


@functools.partial(jax.jit, static_argnames=("config",))
def _agreement_counts(config, params, batch: Batch):
  logits = output_logits(config, params, batch.tokens)  # [b, l, K]
  probs = jax.nn.softmax(logits)
  top1 = batch.soft_ids[..., 0]  # the target's argmax, as an output index (-1: not kept)
  agree = (jnp.argmax(logits, axis=-1) == top1) & (top1 >= 0)
  picked = jnp.take_along_axis(probs, jnp.maximum(batch.soft_ids, 0), axis=-1)
  overlap = jnp.sum(jnp.where(batch.soft_ids >= 0, jnp.minimum(picked, batch.soft_probs), 0), -1)
  return agree, overlap


def agreement(draft: DecoderOnly, examples: Sequence[Response], batch_size: int = 8) -> dict:
  """Teacher-forced agreement with the target over the response positions of `examples`:
  `greedy` (draft argmax == target argmax: the greedy alpha along the target's outputs)
  and `overlap` (sum over the target's top-k of min(p, q): about the temperature-1 alpha,
  a lower bound of it)."""
  c = draft.config
  if c.output_vocab_size:
    table = index_map(draft.params["output_ids"], c.vocab_size)
  else:
    table = np.arange(c.vocab_size, dtype=np.int32)
  agree = overlap = count = 0.0
  for start in range(0, len(examples), batch_size):
    chunk = list(examples[start : start + batch_size])
    batch = make_batch(chunk, table)
    response = np.zeros_like(batch.mask)
    for row, e in enumerate(chunk):
      response[row, len(e.prompt) - 1 : len(e.prompt) - 1 + len(e.tokens)] = 1
    a, o = _agreement_counts(c, draft.params, jax.tree_util.tree_map(jnp.asarray, batch))
    agree += float(np.sum(np.asarray(a) * response))
    overlap += float(np.sum(np.asarray(o) * response))
    count += float(response.sum())
  return {"greedy": agree / max(count, 1), "overlap": overlap / max(count, 1), "tokens": count}


def parameter_count(model: DecoderOnly, *, trainable_only: bool = True) -> int:
  params = split_embedding(model.params)[0] if trainable_only else model.params
  return sum(math.prod(x.shape) for x in jax.tree_util.tree_leaves(params))
