"""Training a feature-level draft (models.feature_draft, Li et al. 2024 "EAGLE") from its
target's features.

Data: the target's responses to chat prompts with its features at every position of
prompt + response (`target_responses.generate_responses(features=True)`, written as shards
by specsample.train.feature_draft_recipe), read back as `FeatureSequence`s.

Objective, per position j (the draft reads tokens <= j and the target's features < j):
  smooth-L1(predicted feature j, target feature j), averaged over the feature width
  + cls_weight * cross-entropy(the target's next-token distribution over the draft's kept
    tokens, the draft's), both computed through the same frozen output rows,
weighted 1 at response positions and `prompt_weight` at prompt positions. Uniform noise
on the input features (EAGLE's) makes the draft robust to reading its own predictions
inside a drafted block. Only the fusing map and the layer(s) are trained: the input
embedding and the output rows are the target's.
"""

from __future__ import annotations

import dataclasses
import functools
import glob
import os
from collections.abc import Callable, Iterator, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct

from specsample.models.decoder_only.network import empty_caches
from specsample.models.feature_draft import FeatureDraft, FeatureDraftNetwork, previous_features
from specsample.train.optim import make_optimizer, run_steps

FROZEN = ("embed", "output_embedding", "output_ids")  # parameters training leaves alone


@dataclasses.dataclass(frozen=True)
class FeatureSequence:
  tokens: np.ndarray  # int32[N]: prompt + response
  # float16[N - 1, feature_size]: the target's (its fused layers' outputs, then the final
  # state), position j's predicts token j + 1; None until computed (LiveFeatures)
  features: np.ndarray | None
  prompt_length: int
  task: str
  temperature: float  # the response's sampling temperature (0: greedy)
  index: int  # the prompt's index in the train prompts
  # int32[N - 1]: the target's greedy token after each position (its argmax given the
  # tokens up to there), where read (`LiveFeatures(..., target_next=True)`); None: not
  # read, and a greedy response's own next tokens are those
  target_next: np.ndarray | None = None


def features_path(shard_path: str) -> str:
  """Where a shard keeps its features when they are not in its .npz: a .npy beside it,
  which `read_shards` maps into memory instead of reading (data larger than the RAM)."""
  return shard_path[: -len(".npz")] + ".features.npy"


def read_shards(directory: str) -> list[FeatureSequence]:
  """Every sequence of the shards in `directory` (*.npz, as the training script writes;
  features in the .npz, or mapped from the .npy at `features_path`)."""
  sequences = []
  for path in sorted(glob.glob(os.path.join(directory, "*.npz"))):
    with np.load(path) as stored:  # each stored[name] reads the whole array again: once
      shard = {name: stored[name] for name in stored.files}
    if "features" not in shard:
      shard["features"] = np.load(features_path(path), mmap_mode="r")
    starts = np.concatenate([[0], np.cumsum(shard["lengths"])])
    feature_starts = np.concatenate([[0], np.cumsum(shard["lengths"] - 1)])
    # one temperature per shard (a generation batch) or per row (shards of a response store)
    temperatures = np.broadcast_to(shard["temperature"], shard["lengths"].shape)
    for row in range(len(shard["lengths"])):
      sequences.append(
        FeatureSequence(
          tokens=shard["tokens"][starts[row] : starts[row + 1]],
          features=shard["features"][feature_starts[row] : feature_starts[row + 1]],
          prompt_length=int(shard["prompt_lengths"][row]),
          task=str(shard["task"][row]),
          temperature=float(temperatures[row]),
          index=int(shard["index"][row]),
        )
      )
  return sequences


@struct.dataclass
class FeatureBatch:
  tokens: jax.Array  # int32[b, L]
  # float32[b, L, feature_size]: the target's features at each position (0: unknown)
  features: jax.Array
  weights: jax.Array  # float32[b, L]: loss weight of each position (0: padding, unknown)
  next_tokens: jax.Array  # int32[b, L]: token j + 1 (-1 past the end), for agreement


def make_batch(
  sequences: Sequence[FeatureSequence], length: int, *, prompt_weight: float = 0.5
) -> FeatureBatch:
  """Sequences (cut to `length`) right-padded to `length` positions."""
  b, d = len(sequences), sequences[0].features.shape[-1]
  tokens = np.zeros((b, length), np.int32)
  features = np.zeros((b, length, d), np.float32)
  weights = np.zeros((b, length), np.float32)
  next_tokens = np.full((b, length), -1, np.int32)
  for row, s in enumerate(sequences):
    n = min(len(s.tokens), length)
    tokens[row, :n] = s.tokens[:n]
    known = min(len(s.features), length)  # positions 0..N-2 have a target feature
    features[row, :known] = s.features[:known]
    weights[row, :known] = np.where(np.arange(known) >= s.prompt_length - 1, 1.0, prompt_weight)
    next_tokens[row, : n - 1] = s.tokens[1:n]
  return FeatureBatch(tokens=tokens, features=features, weights=weights, next_tokens=next_tokens)


def batches(
  sequences: Sequence[FeatureSequence],
  tokens_per_batch: int,
  seed: int,
  *,
  start: int = 0,
  bucket: int = 128,
  prompt_weight: float = 0.5,
  complete: Callable[[list[FeatureSequence]], list[FeatureSequence]] | None = None,
) -> Iterator[FeatureBatch]:
  """Endless shuffled batches of whole sequences of similar length: lengths rounded up to
  a multiple of `bucket` (few compiled shapes), about `tokens_per_batch` positions each.
  The batch of training step n (1, 2, ...) is drawn from a generator seeded with (`seed`,
  n) alone, so a run resumed after step `start` reads what an uninterrupted run would.
  complete: gives the drawn sequences their features (those read without: features None,
  `store_features.LiveFeatures`)."""
  by_width: dict[int, list[FeatureSequence]] = {}
  for s in sequences:
    by_width.setdefault(-(-len(s.tokens) // bucket) * bucket, []).append(s)
  widths = sorted(by_width)
  counts = np.asarray([len(by_width[w]) * w for w in widths], np.float64)
  step = start
  while True:
    step += 1
    rng = np.random.default_rng([seed, step])
    width = widths[rng.choice(len(widths), p=counts / counts.sum())]
    pool = by_width[width]
    size = max(1, min(len(pool), tokens_per_batch // width))
    chosen = [pool[i] for i in rng.choice(len(pool), size, replace=False)]
    if complete is not None:
      chosen = complete(chosen)
    yield make_batch(chosen, width, prompt_weight=prompt_weight)


def step_mask(length: int, depth: int, steps: int) -> jax.Array:
  """Which cache slots position j of drafting step `depth` (0: right after a catch-up,
  reading the target's features) sees, with `steps` copies of the sequence in the cache
  (copy e at slots e * length ..): the target-fed entries up to j - depth, then the step-e
  entry of position j - depth + e for e = 1..depth (itself last) -- the cache of a real
  drafted block.  -> bool[length, steps * length]."""
  j = jnp.arange(length)[:, None]  # [L, 1]
  slot = jnp.arange(steps * length)[None, :]  # [1, S * L]
  allowed = (slot < length) & (slot <= j - depth)
  for e in range(1, depth + 1):
    allowed |= slot == e * length + j - depth + e
  return allowed


def predict_steps(config, params, tokens, previous, steps: int = 1):
  """The draft over whole sequences, as drafting steps 1..`steps` of a block would run it
  (training-time test): step 1 reads `previous` (the target's features), step s > 1 reads
  step s - 1's predictions, with the cache of a real block (`step_mask`). -> ([predicted
  features [b, L, d], kept logits [b, L, K]] per step)."""
  b, length = tokens.shape
  network = FeatureDraftNetwork(config)
  positions = jnp.broadcast_to(jnp.arange(length, dtype=jnp.int32), (b, length))
  caches = empty_caches(config, b, steps * length)
  outputs = []
  for depth in range(steps):
    allowed = jnp.broadcast_to(step_mask(length, depth, steps), (b, length, steps * length))
    x, caches = network.apply(
      {"params": params}, tokens, previous, positions, caches,
      jnp.full((b,), depth * length, jnp.int32), allowed,
      method=FeatureDraftNetwork.predict_features,
    )  # fmt: skip
    logits = network.apply({"params": params}, x, method=FeatureDraftNetwork.kept_logits)
    outputs.append((x, logits))
    previous = previous_features(jax.lax.stop_gradient(x))
  return outputs


def loss(
  config, params, batch: FeatureBatch, key, *, cls_weight: float, noise: float, steps: int = 1
):
  """The objective above, averaged over the weighted positions and the drafting steps."""
  previous = previous_features(batch.features)  # [b, L, feature_size]
  if noise:
    previous = previous + jax.random.uniform(key, previous.shape, minval=-noise, maxval=noise)
  final = batch.features[..., -config.d_model :]  # [b, L, d]: the final-normed state
  target_logits = jnp.einsum("bld,kd->blk", final, params["output_embedding"])
  target_probs = jax.nn.softmax(target_logits)
  total = 0.0
  for x, draft_logits in predict_steps(config, params, batch.tokens, previous, steps):
    cross_entropy = -jnp.sum(target_probs * jax.nn.log_softmax(draft_logits), axis=-1)  # [b, L]
    error = jnp.abs(x - final)
    smooth_l1 = jnp.mean(jnp.where(error < 1.0, 0.5 * error**2, error - 0.5), axis=-1)
    per_position = smooth_l1 + cls_weight * cross_entropy
    total += jnp.sum(per_position * batch.weights) / jnp.maximum(jnp.sum(batch.weights), 1.0)
  return total / steps


@dataclasses.dataclass(frozen=True)
class FeatureDistillSettings:
  steps: int = 2000
  tokens_per_batch: int = 4096
  learning_rate: float = 1e-3
  warmup_steps: int = 100
  weight_decay: float = 0.01
  cls_weight: float = 0.5
  noise: float = 0.1  # half-width of the uniform noise on input features
  steps_ahead: int = 1  # drafting steps simulated per position (training-time test)
  prompt_weight: float = 0.5
  max_seconds: float | None = None  # stop early when the wall-clock budget is spent
  log_every: int = 25
  seed: int = 0
  final_fraction: float = 0.05  # the learning rate's cosine decays to this share of it


def split_frozen(params) -> tuple[dict, dict]:
  """(trainable, frozen) parameters."""
  trainable = {k: v for k, v in params.items() if k not in FROZEN}
  return trainable, {k: v for k, v in params.items() if k in FROZEN}


def train(
  draft: FeatureDraft,
  next_batch: Callable[[], FeatureBatch],
  settings: FeatureDistillSettings,
  *,
  opt_state=None,
  start_step: int = 0,
  progress: Callable[[int, float], None] | None = None,
  checkpoint: Callable[[FeatureDraft, object, int], None] | None = None,
  checkpoint_every: int = 100,
) -> tuple[FeatureDraft, object, list[tuple[int, float]]]:
  """Trains the fusing map and layer(s) for `settings.steps` steps (from `start_step`,
  resuming with `opt_state` and `next_batch` giving the batches from step `start_step` + 1:
  `batches(..., start=start_step)`; the run then goes on bit for bit as an uninterrupted
  one, its noise keyed by the step). Returns the draft, the optimizer state and the (step, mean
  loss) log."""
  config = draft.config
  optimizer = make_optimizer(settings)
  trainable, frozen = split_frozen(draft.params)
  trainable = jax.tree_util.tree_map(lambda x: jnp.array(x, copy=True), trainable)

  @functools.partial(jax.jit, donate_argnums=(0, 1))
  def step(trainable, opt_state, batch, key):
    def objective(trainable):
      return loss(config, {**trainable, **frozen}, batch, key, cls_weight=settings.cls_weight,
                  noise=settings.noise, steps=settings.steps_ahead)  # fmt: skip

    value, grads = jax.value_and_grad(objective)(trainable)
    updates, opt_state = optimizer.update(grads, opt_state, trainable)
    return optax.apply_updates(trainable, updates), opt_state, value

  def model(trainable) -> FeatureDraft:
    return FeatureDraft(params={**trainable, **frozen}, config=config)

  def keyed_step(trainable, opt_state, batch, number):  # the noise's key: a function of
    return step(trainable, opt_state, batch, jax.random.fold_in(key, number))  # the step

  opt_state = optimizer.init(trainable) if opt_state is None else opt_state
  key = jax.random.key(settings.seed)
  trainable, opt_state, log = run_steps(
    keyed_step, trainable, opt_state, next_batch, settings, start_step=start_step,
    progress=progress,
    checkpoint=checkpoint and (lambda t, o, number: checkpoint(model(t), o, number)),
    checkpoint_every=checkpoint_every,
  )  # fmt: skip
  return model(trainable), opt_state, log


@functools.partial(jax.jit, static_argnames=("config", "steps"))
def _agreement_counts(config, params, batch: FeatureBatch, steps: int):
  """Per drafting step and position: does the draft's argmax equal batch.next_tokens (the
  target's argmax at response positions: a greedy response's next tokens, or those read
  for a sampled one, `agreement`)?  -> bool[steps, b, L]"""
  outputs = predict_steps(config, params, batch.tokens, previous_features(batch.features), steps)
  return jnp.stack(
    [
      params["output_ids"][jnp.argmax(logits, axis=-1)] == batch.next_tokens
      for _, logits in outputs
    ]
  )


def agreement(
  draft: FeatureDraft, sequences: Sequence[FeatureSequence], batch_size: int = 4, steps: int = 1
):
  """{"greedy": share of the response positions where the draft's first proposal (after
  the target's features) is the target's greedy token, "tokens": how many, and with
  steps > 1 "by_step": the same for drafting steps 1..steps of a block, and "chain_by_step":
  the share of the blocks begun at a response position whose steps 1..s all agree (step s
  at s - 1 positions on; a block cut by the response's end fails there)}. The target's
  greedy token is a greedy response's next token, or the `target_next` read for a
  sequence (a sampled response's); sampled responses without it are left out."""
  scored = [s for s in sequences if s.temperature == 0.0 or s.target_next is not None]
  hits, chains, total = np.zeros(steps), np.zeros(steps), 0
  for start in range(0, len(scored), batch_size):
    chunk = scored[start : start + batch_size]
    width = -(-max(len(s.tokens) for s in chunk) // 128) * 128
    batch = make_batch(chunk, width)
    for row, s in enumerate(chunk):  # the target's greedy tokens, where they were read
      if s.target_next is not None:
        batch.next_tokens[row, : len(s.tokens) - 1] = s.target_next
    agree = np.asarray(_agreement_counts(draft.config, draft.params, batch, steps))
    for row, s in enumerate(chunk):
      response = slice(s.prompt_length - 1, len(s.tokens) - 1)
      hits += agree[:, row, response].sum(axis=1)
      chains += chain_agreement(agree[:, row, response]).sum(axis=1)
      total += len(s.tokens) - s.prompt_length
  result = {"greedy": float(hits[0]) / max(total, 1), "tokens": total}
  if steps > 1:
    result["by_step"] = [float(h) / max(total, 1) for h in hits]
    result["chain_by_step"] = [float(h) / max(total, 1) for h in chains]
  return result


def chain_agreement(agree: np.ndarray) -> np.ndarray:
  """bool[steps, L] -> bool[steps, L]: at [s, i], whether the block begun at position i
  agrees at every step up to s + 1, step t's verdict read at position i + t (past the end
  of `agree`: disagreement)."""
  steps, length = agree.shape
  shifted = np.zeros_like(agree, dtype=bool)
  for step in range(steps):
    shifted[step, : length - step] = agree[step, step:]
  return np.logical_and.accumulate(shifted, axis=0)


def trainable_parameter_count(draft: FeatureDraft) -> int:
  return sum(
    int(np.prod(x.shape)) for x in jax.tree_util.tree_leaves(split_frozen(draft.params)[0])
  )


def draft_for_target(
  target, output_ids: np.ndarray, *, num_layers: int = 1, seed: int = 0, feature_layers=()
):
  """A new feature draft for a DecoderOnly target with a tied output layer: random fusing
  map(s) and layer(s) of the target's shape, the target's input embedding (shared) and its
  output rows of the kept tokens `output_ids` int32[K]; feature_layers: the target layers
  it fuses with the final state (EAGLE-3)."""
  from specsample.models.feature_draft import feature_draft_config

  config = feature_draft_config(
    target.config, len(output_ids), num_layers=num_layers, feature_layers=tuple(feature_layers)
  )
  draft = FeatureDraft.init_random(config, seed)
  embedding = target.params["embed"]["embedding"]
  ids = jnp.asarray(output_ids, jnp.int32)
  params = {
    **draft.params,
    "embed": {"embedding": embedding},
    "output_embedding": jnp.take(jnp.asarray(embedding, jnp.float32), ids, axis=0),
    "output_ids": ids,
  }
  return FeatureDraft(params=params, config=config)
