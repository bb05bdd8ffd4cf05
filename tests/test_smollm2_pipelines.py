"""The SmolLM2 draft pipelines (specsample.train.smollm2_*) end to end on a tiny random
target with a stand-in tokenizer, and the pieces they share: the optimizer, resumable
training state, batches, the validation split and the model cards."""

from __future__ import annotations

import dataclasses
import json
import os
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from specsample import SamplingConfig, generate
from specsample.checkpoints.feature_draft import load_feature_draft, save_feature_draft
from specsample.data.chat_prompts import ChatPrompt, write_jsonl
from specsample.models.decoder_only import DecoderOnly, DecoderOnlyConfig
from specsample.train import distill_decoder as dd
from specsample.train import distill_features as df
from specsample.train import feature_draft_card as feature_card
from specsample.train import feature_draft_card_text as feature_card_text
from specsample.train import feature_draft_recipe as fd
from specsample.train import held_out
from specsample.train import pipeline_data as sd
from specsample.train import token_draft_recipe as td
from specsample.train.feature_draft_options import DEFAULT_STAGES
from specsample.train.optim import make_optimizer
from specsample.train.pipeline import run_pipeline
from specsample.train.resume import load_training_state, save_training_state

TARGET = DecoderOnlyConfig(
  vocab_size=96, d_model=32, num_heads=4, num_kv_heads=2, head_dim=8, mlp_dim=64,
  num_layers=2, tie_word_embeddings=True, eos_id=1, pad_id=0, rope_theta=1e4,
)  # fmt: skip
TASKS = ("chat", "rewrite", "summarize")


class Tokenizer:
  """A stand-in chat tokenizer: <start> + one id per character + <end>."""

  eos_id = 1

  def apply_chat_template(self, messages):
    return [17] + [20 + ord(c) % 70 for c in messages[0]["content"]] + [18]


@pytest.fixture(scope="module")
def target():
  return DecoderOnly.init_random(TARGET, seed=2)


def write_prompts(work, count: int = 24) -> list[ChatPrompt]:
  rng = np.random.default_rng(0)
  words = ["alpha", "beta", "gamma", "delta", "list", "file", "open", "read"]
  prompts = [
    ChatPrompt(TASKS[i % 3], " ".join(rng.choice(words, rng.integers(1, 6))), f"chat:{i}")
    for i in range(count)
  ]
  os.makedirs(work, exist_ok=True)
  write_jsonl(prompts, os.path.join(work, "train_prompts.jsonl"))
  return prompts


def write_bench_reports(directory) -> str:
  """Two bench reports with what the cards read (one sweep point per temperature)."""
  paths = []
  for name in ("with_lookup", "alone"):
    sweep = [
      {
        "temperature": t,
        "rule": "token",
        "gamma": 3,
        "alpha": 0.5,
        "speedup": 1.25,
        "tokens_per_target_call": 2.0,
        "efficiency": 0.6,
      }
      for t in (0.0, 1.0)
    ]
    report = {
      "sweep": sweep, "batch": [{"batch_size": 1, "temperature": 0.0, "speedup": 1.25}],
      "settings": {"temperatures": [0.0, 1.0], "max_new_tokens": 6}, "num_prompts": 3,
      "costs": {"c": 0.1, "r": {"4": 1.1}, "target_seconds": {"1": 0.02}, "draft_seconds": 0.002},
    }  # fmt: skip
    paths.append(os.path.join(directory, f"{name}.json"))
    with open(paths[-1], "w") as f:
      json.dump(report, f)
  return ",".join(paths)


# ---------------------------------------------------------------- shared pieces


def test_one_optimizer_warms_up_then_decays_to_its_final_fraction():
  settings = dd.DistillSettings(steps=10, warmup_steps=2, learning_rate=1.0, weight_decay=0.0)
  optimizer = make_optimizer(settings)
  params = {"w": jnp.zeros(())}
  state = optimizer.init(params)
  rates = []
  for _ in range(11):  # with a constant gradient each Adam update is -learning rate
    updates, state = optimizer.update({"w": jnp.asarray(0.5)}, state, params)
    rates.append(-float(updates["w"]))
  np.testing.assert_allclose(rates[:3], [0.0, 0.5, 1.0], atol=1e-4)
  np.testing.assert_allclose(rates[10], settings.final_fraction, atol=1e-4)
  assert all(a >= b for a, b in zip(rates[2:], rates[3:]))


def test_training_state_round_trips(tmp_path):
  trainable = {"a": jnp.arange(3.0), "b": {"c": jnp.ones((2, 2))}}
  opt_state = optax.adamw(1e-3).init(trainable)
  path = str(tmp_path / "checkpoint.npz")
  save_training_state(path, trainable, opt_state, 7)
  templates = jax.tree_util.tree_map(jnp.zeros_like, (trainable, opt_state))
  loaded, loaded_state, step = load_training_state(path, *templates)
  assert step == 7
  leaves = jax.tree_util.tree_leaves
  for a, b in zip(leaves((loaded, loaded_state)), leaves((trainable, opt_state)), strict=True):
    np.testing.assert_array_equal(a, b)


def test_a_bfloat16_training_state_reads_back_rounded_into_the_templates_dtypes(tmp_path):
  trainable = {"a": jnp.asarray([1.0, 1 + 2**-10, -3.3]), "b": jnp.ones((2, 2))}
  opt_state = optax.adamw(1e-3).init(trainable)
  path = str(tmp_path / "checkpoint.npz")
  save_training_state(path, trainable, opt_state, 5, dtype="bfloat16")
  loaded, loaded_state, step = load_training_state(path, trainable, opt_state)
  assert step == 5 and loaded["a"].dtype == np.float32
  np.testing.assert_array_equal(loaded["a"], [1.0, 1.0, -3.296875])  # bfloat16's 8 bits
  count = jax.tree_util.tree_leaves(loaded_state)[0]  # the step count stays an integer
  assert count.dtype == np.int32 and int(count) == 0
  with pytest.raises(ValueError, match="bfloat16"):
    save_training_state(path, trainable, opt_state, 5, dtype="float16")


def test_generation_batches_sample_every_fourth_prompt_and_keep_their_ids():
  prompts = [ChatPrompt("chat", "x" * n, "") for n in range(1, 41)]
  batches = sd.generation_batches(prompts, Tokenizer(), 8, 0, batch_id=lambda t, s: f"{t:g}/{s}")
  assert sorted(i for _, _, rows in batches for i, _ in rows) == list(range(40))
  for batch_id, temperature, rows in batches:
    assert batch_id.startswith(f"{temperature:g}/") and len(rows) <= 8
    assert all((i % 4 == 3) == (temperature == 1.0) for i, _ in rows)
  again = sd.generation_batches(prompts, Tokenizer(), 8, 0, batch_id=lambda t, s: f"{t:g}/{s}")
  assert batches == again


def test_the_fit_sample_takes_sampled_training_responses_spread_over_the_store():
  items = [SimpleNamespace(temperature=1.0 if i % 4 == 3 else 0.0, index=i) for i in range(40)]
  assert [s.index for s in held_out.fit_sample(items, 5)] == [3, 11, 19, 27, 35]  # every 2nd of 10
  assert [s.index for s in held_out.fit_sample(items, 50)] == list(range(3, 40, 4))  # all there are


def test_greedy_held_out_gives_each_prompt_its_greedy_response_alone(target):
  rng = np.random.default_rng(3)
  sequences = [
    df.FeatureSequence(
      tokens=rng.integers(2, TARGET.vocab_size, length + 5).astype(np.int32),
      features=None,
      prompt_length=length,
      task=TASKS[i % 3],
      temperature=1.0,
      index=20 * i,
    )  # fmt: skip
    for i, length in enumerate([9, 70, 3, 40, 66])  # widths 64 and 128, a short last batch
  ]
  greedy = held_out.greedy_held_out(target, sequences, max_new_tokens=6, batch_size=2)
  for s, g in zip(sequences, greedy, strict=True):
    prompt = s.tokens[: s.prompt_length]
    alone = generate(target, prompt[None], max_new_tokens=6, sampling=SamplingConfig(0.0))
    response = np.asarray(alone.tokens)[0, : int(alone.lengths[0])]
    assert g.tokens.tolist() == [*prompt.tolist(), *response.tolist()]
    assert (g.prompt_length, g.task, g.index, g.temperature) == (s.prompt_length, s.task,
                                                                   s.index, 0.0)  # fmt: skip
    assert g.features is None and g.target_next is None


def test_every_twentieth_prompt_validates():
  train, validation = sd.split_validation(list(range(45)), lambda i: i)
  assert validation == [0, 20, 40] and len(train) == 42


@pytest.mark.parametrize("name", ["feature_draft", "feature_draft_v1"])
def test_the_shipped_feature_cards_are_their_metrics_written_out(name):
  directory = os.path.join(sd.BUNDLE, name)
  with open(os.path.join(directory, "metrics.json")) as f:
    metrics = json.load(f)
  with open(os.path.join(directory, "MODEL_CARD.md")) as f:
    assert feature_card_text.card_text(metrics) == f.read()


# ---------------------------------------------------------------- the pipelines


@pytest.mark.slow
def test_the_token_draft_pipeline_on_a_tiny_target(target, tmp_path, monkeypatch):
  work, bundle = str(tmp_path / "work"), str(tmp_path / "bundle")
  prompts = write_prompts(work)
  monkeypatch.setattr(sd, "load_target", lambda *_: (target, Tokenizer()))
  options = td.TokenDraftOptions(
    work=work, bundle=bundle, stages="prompts,generate,vocab,train,export,card",
    generate_batch=8, max_new_tokens=8, output_vocab=48, layers="1", train_steps=3,
    batch_size=4, bench_reports=write_bench_reports(tmp_path),
  )  # fmt: skip
  os.makedirs(bundle)
  open(os.path.join(bundle, "prompts.jsonl"), "w").close()  # no bench prompts to build
  run_pipeline(td.TokenDraftRecipe(options))
  records = td.read_responses(os.path.join(work, "responses.jsonl"))
  assert sorted(r["index"] for r in records) == list(range(len(prompts)))
  assert {r["temperature"] for r in records if r["index"] % 4 == 3} == {1.0}
  train, validation = td.load_responses(work)
  assert len(validation) == 2 and len(train) == 22
  with open(os.path.join(work, "vocab.json")) as f:
    vocab = json.load(f)
  assert len(vocab["ids"]) == 48 and set(sd.always_kept(Tokenizer())) <= set(vocab["ids"])
  with open(os.path.join(work, "train_log.json")) as f:
    log = json.load(f)
  assert log["history"][-1][0] == 3 and log["settings"] == dataclasses.asdict(options)
  assert os.path.exists(os.path.join(bundle, "draft", "model.safetensors"))
  with open(os.path.join(bundle, "metrics.json")) as f:
    metrics = json.load(f)
  assert metrics["draft"]["output_vocab_size"] == 48 and metrics["training"]["steps"] == 3
  with open(os.path.join(bundle, "MODEL_CARD.md")) as f:
    assert "| alone | 1.25x (gamma 3, alpha 0.50, 2.00 tokens/call) |" in f.read()
  # Resuming: nothing left to generate, and the checkpoint comes back at its step.
  td.stage_generate(options, target, Tokenizer())
  assert len(td.read_responses(os.path.join(work, "responses.jsonl"))) == len(records)
  draft = td.make_draft(options, target)
  settings = dd.DistillSettings(steps=3, warmup_steps=0)
  _, _, step = td.load_checkpoint(os.path.join(work, "checkpoint.npz"), draft, settings)
  assert step == 3


@pytest.mark.slow
def test_the_feature_draft_pipeline_on_a_tiny_target(target, tmp_path, monkeypatch):
  work, bundle = str(tmp_path / "work"), str(tmp_path / "bundle")
  prompts = write_prompts(work)
  monkeypatch.setattr(sd, "load_target", lambda *_: (target, Tokenizer()))
  bench_prompts = str(tmp_path / "bench_prompts.jsonl")
  write_jsonl(
    [ChatPrompt("chat", "open file", ""), ChatPrompt("rewrite", "beta", "")], bench_prompts
  )
  options = fd.FeatureDraftOptions(
    work=work, bundle=bundle, stages="prompts,generate,vocab,train,export,card",
    features="shards", generate_batch=8, max_new_tokens=8, output_vocab=48, train_steps=2,
    tokens_per_batch=256,
    bench_prompts=bench_prompts, bench_reports=write_bench_reports(tmp_path),
    card_note="Continues the draft now in somewhere_v1/.",
  )  # fmt: skip
  run_pipeline(fd.FeatureDraftRecipe(options))
  train, validation = fd.load_sequences(options)
  assert sorted(s.index for s in train + validation) == list(range(len(prompts)))
  for s in train + validation:
    assert s.features.shape == (len(s.tokens) - 1, TARGET.d_model)
    assert s.tokens.tolist()[: s.prompt_length] == Tokenizer().apply_chat_template(
      [{"role": "user", "content": prompts[s.index].prompt}]
    )
  with open(os.path.join(work, "validation.json")) as f:
    scores = json.load(f)
  assert set(scores) == {"all", "chat", "summarize"} and len(scores["all"]["by_step"]) == 3
  with open(os.path.join(bundle, "feature_draft", "metrics.json")) as f:
    metrics = json.load(f)
  by_task = metrics["alpha_by_task"]
  assert by_task["gamma"] == 3 and by_task["t0"]["all"]["prompts"] == 2
  assert "kept_token_coverage" not in metrics["data"]  # the vocabulary stage's own tokens
  ids = np.arange(40, 88)  # a continued draft keeps another draft's tokens
  facts = feature_card.training_facts(options, os.path.join(bundle, "feature_draft"), ids)
  held = np.concatenate([s.tokens[s.prompt_length :] for s in validation])
  assert 0 < facts["data"]["kept_token_coverage"] == pytest.approx(np.isin(held, ids).mean())
  assert set(by_task["t1"]) == {"all", "chat", "rewrite"}
  with open(os.path.join(bundle, "feature_draft", "MODEL_CARD.md")) as f:
    card = f.read()
  assert "| alone | 1.25x (gamma 3, alpha 0.50, 2.00 tokens/call) |" in card
  # the card quotes the command that trained the draft, from its training log
  assert f"`python scripts/train/train_smollm2_feature_draft.py --work {work} " in card
  assert "--output-vocab 48 --train-steps 2 --tokens-per-batch 256`" in card
  assert "\n\nContinues the draft now in somewhere_v1/." in card  # the note, not a flag
  assert "--card-note" not in card
  # validate with features kept in shards: the greedy responses and the training sample
  # get theirs from the target (the shards hold none of them)
  run_pipeline(fd.FeatureDraftRecipe(dataclasses.replace(options, stages="validate")))
  on_greedy = sd.read_json(os.path.join(work, "validation_greedy.json"))
  assert on_greedy["scores"]["draft"]["all"]["tokens"] > 0
  assert sd.read_json(os.path.join(work, "validation_train.json"))["scores"]["all"]["tokens"] > 0


@pytest.mark.slow
def test_the_feature_draft_pipeline_fuses_target_layers(target, tmp_path, monkeypatch):
  """--feature-layers: shards with the layers' outputs; a draft continued from one that
  reads the final state alone starts fusing them; its checkpoint and card say so."""
  work, bundle = str(tmp_path / "work"), str(tmp_path / "bundle")
  write_prompts(work)
  monkeypatch.setattr(sd, "load_target", lambda *_: (target, Tokenizer()))
  bench_prompts = str(tmp_path / "bench_prompts.jsonl")
  write_jsonl([ChatPrompt("chat", "open file", "")], bench_prompts)
  start = df.draft_for_target(target, np.arange(1, 49, dtype=np.int32), seed=1)
  save_feature_draft(start, tmp_path / "start", dtype="float32")
  options = fd.FeatureDraftOptions(
    work=work, bundle=bundle, stages="prompts,generate,vocab,train,export,card",
    features="shards", generate_batch=8, max_new_tokens=8, output_vocab=48, train_steps=2,
    tokens_per_batch=256,
    feature_layers="0", init_from=str(tmp_path / "start"), steps_ahead=2,
    bench_prompts=bench_prompts,
    bench_reports=write_bench_reports(tmp_path),
  )  # fmt: skip
  run_pipeline(fd.FeatureDraftRecipe(options))
  train, _ = fd.load_sequences(options)
  assert {s.features.shape[-1] for s in train} == {2 * TARGET.d_model}
  saved = load_feature_draft(os.path.join(bundle, "feature_draft"), target)
  assert saved.config.feature_layers == (0,) and saved.feature_size == 64
  with open(os.path.join(bundle, "feature_draft", "metrics.json")) as f:
    counted = json.load(f)["draft"]["trainable_parameters"]
  assert (
    counted == df.trainable_parameter_count(saved) == df.trainable_parameter_count(start) + 64 * 32
  )  # the stored arrays: the fusing maps (reduce: [2 d, d]) and the layer
  with open(os.path.join(bundle, "feature_draft", "MODEL_CARD.md")) as f:
    card = f.read()
  assert "the outputs of its layers 0 (RMS-normalised) and its final state -> linear 64" in card
  assert "--feature-layers 0 " in card
  os.remove(os.path.join(work, "train_log.json"))  # train again, on shards of another width
  if os.path.exists(os.path.join(work, "checkpoint.npz")):
    os.remove(os.path.join(work, "checkpoint.npz"))
  plain = dataclasses.replace(options, stages="train", feature_layers="", init_from=None)
  with pytest.raises(sd.StageError, match="64 wide, the draft reads 32"):
    run_pipeline(fd.FeatureDraftRecipe(plain))
  with pytest.raises(ValueError, match="layer indices like 2,15"):
    run_pipeline(
      fd.FeatureDraftRecipe(dataclasses.replace(options, stages="train", feature_layers="low"))
    )


@pytest.mark.slow
def test_the_feature_draft_trains_from_a_committed_response_store(target, tmp_path, monkeypatch):
  """The default stages: features recomputed from the store's ids, then vocab and train."""
  from specsample.train import on_policy, store_features
  from specsample.train.response_store import ResponseStore, StoreSettings
  from specsample.train.target_responses import read_sequences

  tokenizer = Tokenizer()
  store = ResponseStore(str(tmp_path / "store"))
  store.open(StoreSettings(target="tiny", target_bytes=1, activations="int8", max_new_tokens=8,
                           batch_size=8, widths=(32, 64), sampled_every=4, seed=0))  # fmt: skip
  prompts = write_prompts(str(tmp_path / "prompts"))
  store.write_prompts(prompts)
  encoded = [tokenizer.apply_chat_template([{"role": "user", "content": p.prompt}])
             for p in prompts]  # fmt: skip
  on_policy.generate_into(target, store, encoded, minutes=10)
  monkeypatch.setattr(sd, "load_target", lambda *_: (target, tokenizer))
  work = str(tmp_path / "work")
  options = fd.FeatureDraftOptions(
    work=work, bundle=str(tmp_path / "bundle"), stages="vocab,train", store=store.root,
    output_vocab=48, train_steps=3, tokens_per_batch=256, checkpoint_dtype="bfloat16",
    train_minutes=1e-6,
  )  # fmt: skip
  assert DEFAULT_STAGES[:2] == ("vocab", "train") and options.features == "live"
  run_pipeline(fd.FeatureDraftRecipe(options))
  train, validation = fd.load_sequences(options, tokenizer)
  assert sorted(s.index for s in train + validation) == list(range(len(prompts)))
  assert {s.temperature for s in train + validation} == {0.0, 1.0}  # a temperature per row
  for s in train + validation:
    assert s.tokens.tolist()[: s.prompt_length] == encoded[s.index]
    assert s.features is None  # computed when a batch draws the sequence
  # Read in order of length, two per call (three calls, the last one short), each call
  # padded to its own width; given back in the order drawn.
  live = store_features.LiveFeatures(target, rows=2)(train[:5])
  assert [s.index for s in live] == [s.index for s in train[:5]]
  for s in live:
    _, _, alone = read_sequences(target, [s.tokens.tolist()], k=0)
    np.testing.assert_allclose(s.features, alone[0, : len(s.tokens) - 1], rtol=2e-3, atol=2e-3)
  train_log = sd.read_json(os.path.join(work, "train_log.json"))
  assert train_log["steps_done"] == 1  # the budget (under a step) ends the run after one
  assert not os.path.exists(os.path.join(work, "shards"))  # no features kept
  with np.load(os.path.join(work, "checkpoint.npz")) as saved:
    rounded = saved["bfloat16_leaves"].tolist()
    assert rounded and all(saved[f"arr_{i}"].dtype == np.uint16 for i in rounded)
  # export alone: the cut training's draft (step 1 of 3), as the checkpoint holds it; never
  # over the installed bundle's draft (here a stand-in for it)
  shipped = tmp_path / "shipped"
  shipped.mkdir()
  monkeypatch.setattr(fd, "BUNDLE", str(shipped))
  with pytest.raises(sd.StageError, match="stopped at step 1 of 3; the installed bundle"):
    run_pipeline(fd.FeatureDraftRecipe(dataclasses.replace(options, stages="export",
                                                           bundle=str(shipped))))  # fmt: skip
  assert not os.listdir(shipped)
  cut = dataclasses.replace(options, stages="export", bundle=str(tmp_path / "cut"))
  run_pipeline(fd.FeatureDraftRecipe(cut))
  exported = load_feature_draft(os.path.join(cut.bundle, "feature_draft"), target)
  saved_draft, step = fd.checkpoint_draft(options, lambda: target, "export")
  assert step == 1
  fuse = exported.params["fuse"]["kernel"], saved_draft.params["fuse"]["kernel"]
  np.testing.assert_allclose(*fuse, rtol=1e-3, atol=1e-4)  # exported in float16
  run_pipeline(
    fd.FeatureDraftRecipe(dataclasses.replace(options, stages="train", train_minutes=10))
  )
  train_log = sd.read_json(os.path.join(work, "train_log.json"))  # the next session goes on
  assert train_log["steps_done"] == 3 and [step for step, _ in train_log["history"]] == [1, 3]
  # validate: the checkpoint's draft beside the draft it is measured against (here the
  # bundle's, exported from it), scored against the target's greedy tokens: the held-out
  # responses are all sampled ones (every 20th prompt is an every 4th one too)
  assert validation and all(s.temperature == 1.0 for s in validation)
  with pytest.raises(sd.StageError, match="the train stage makes it"):
    run_pipeline(fd.FeatureDraftRecipe(dataclasses.replace(
      options, stages="validate", work=str(tmp_path / "untrained"))))  # fmt: skip
  run_pipeline(fd.FeatureDraftRecipe(dataclasses.replace(options, stages="train,export")))
  run_pipeline(fd.FeatureDraftRecipe(dataclasses.replace(options, stages="validate")))
  scores = sd.read_json(os.path.join(work, "validation.json"))["all"]
  baseline = sd.read_json(os.path.join(work, "validation_baseline.json"))
  assert baseline["draft"] == os.path.join(options.bundle, "feature_draft")
  responses = sum(len(s.tokens) - s.prompt_length for s in validation)
  assert scores["tokens"] == baseline["scores"]["all"]["tokens"] == responses > 0
  assert len(scores["by_step"]) == 3
  np.testing.assert_allclose(baseline["scores"]["all"]["by_step"], scores["by_step"], atol=0.05)
  # and the draft on as many sampled training responses: the fit gap
  fit = sd.read_json(os.path.join(work, "validation_train.json"))
  sampled = held_out.fit_sample(train, len(validation))
  assert fit["sequences"] == len(sampled) > 0 and all(s.temperature > 0 for s in sampled)
  assert fit["scores"]["all"]["tokens"] == sum(len(s.tokens) - s.prompt_length for s in sampled)
  assert len(fit["scores"]["all"]["by_step"]) == 3
  # both drafts on the target's greedy responses to the held-out prompts
  on_greedy = sd.read_json(os.path.join(work, "validation_greedy.json"))
  assert on_greedy["sequences"] == len(validation)
  for name in ("draft", "baseline"):
    scores_of = on_greedy["scores"][name]["all"]
    assert scores_of["tokens"] > 0 and len(scores_of["by_step"]) == 3
  # the card of a store's draft: its data and the validate stage's three sets
  bench_prompts = str(tmp_path / "bench_prompts.jsonl")
  write_jsonl([ChatPrompt("chat", "open file", ""), ChatPrompt("rewrite", "beta", "")],
              bench_prompts)  # fmt: skip
  run_pipeline(fd.FeatureDraftRecipe(dataclasses.replace(
    options, stages="card", bench_prompts=bench_prompts,
    bench_reports=write_bench_reports(tmp_path))))  # fmt: skip
  with open(os.path.join(options.bundle, "feature_draft", "MODEL_CARD.md")) as f:
    card = f.read()
  stored = store.summary()
  assert f"- Data: the on-policy response store `{store.root}`" in card
  assert f"generated in {round(stored['seconds'] / 60, 1)} min" in card
  assert (
    f"(on the responses `scripts/train/generate_on_policy.py` stored in `{store.root}`)" in card
  )
  greedy_steps = " / ".join(f"{x:.3f}" for x in on_greedy["scores"]["draft"]["all"]["by_step"])
  assert f"| the target's greedy responses to the held-out prompts | {greedy_steps} |" in card
  assert "| sampled training responses | " in card and "generated in None" not in card
  empty = ResponseStore(str(tmp_path / "empty"))
  with pytest.raises(sd.StageError, match="holds no responses"):
    run_pipeline(fd.FeatureDraftRecipe(dataclasses.replace(options, store=empty.root)))
  shards = dataclasses.replace(options, stages="features", features="shards",
                               shards=str(tmp_path / "features"))  # fmt: skip
  run_pipeline(fd.FeatureDraftRecipe(shards))  # the features of every stored response, kept
  kept, _ = fd.load_sequences(shards)
  assert {s.index for s in kept} == {s.index for s in train}
  assert all(s.features.shape == (len(s.tokens) - 1, TARGET.d_model) for s in kept)


def test_the_feature_draft_reads_several_stores_each_with_its_own_held_out_prompts(
  target, tmp_path
):
  from specsample.train import on_policy
  from specsample.train.feature_draft_card import store_facts
  from specsample.train.feature_draft_options import STORE_INDEX_STRIDE
  from specsample.train.response_store import ResponseStore, StoreSettings

  tokenizer = Tokenizer()
  stores = []
  for name, count, max_new in (("first", 24, 8), ("second", 45, 6)):
    store = ResponseStore(str(tmp_path / name))
    store.open(StoreSettings(target="tiny", target_bytes=1, activations="int8",
                             max_new_tokens=max_new, batch_size=8, widths=(32, 64),
                             sampled_every=4, seed=0))  # fmt: skip
    prompts = write_prompts(str(tmp_path / f"prompts_{name}"), count)
    store.write_prompts(prompts)
    encoded = [tokenizer.apply_chat_template([{"role": "user", "content": p.prompt}])
               for p in prompts]  # fmt: skip
    on_policy.generate_into(target, store, encoded, minutes=10)
    stores.append((store, encoded))
  both = fd.FeatureDraftOptions(work=str(tmp_path / "work"),
                                store=",".join(s.root for s, _ in stores))  # fmt: skip
  train, validation = fd.load_sequences(both, tokenizer)
  indices = sorted(s.index for s in train + validation)
  assert indices == [*range(24), *(STORE_INDEX_STRIDE + i for i in range(45))]
  # each store's every 20th prompt, the two stores interleaved in proportion (2 and 3)
  held = [0, 20, *(STORE_INDEX_STRIDE + i for i in (0, 20, 40))]
  assert sorted(s.index for s in validation) == held
  assert [s.index // STORE_INDEX_STRIDE for s in validation] == [0, 1, 1, 0, 1]
  for s in train + validation:  # each store's own prompts
    store, encoded = stores[s.index // STORE_INDEX_STRIDE]
    assert s.tokens.tolist()[: s.prompt_length] == encoded[s.index % STORE_INDEX_STRIDE]
  alone, _ = fd.load_sequences(dataclasses.replace(both, store=stores[0][0].root), tokenizer)
  assert [s.index for s in alone] == [s.index for s in train if s.index < STORE_INDEX_STRIDE]
  assert held_out.response_limit(both) == 8
  facts = store_facts(both)
  assert facts["store_responses"] == 24 + 45 and facts["store"] == both.store
  assert facts["turn_prompts"] == 0  # template prompts only
  prompts_text, data_text = feature_card_text.data_texts({**facts, "turn_prompts": 7}, {})
  assert "and 7 user turns the target wrote itself" in prompts_text
  first, second = (store.root for store, _ in stores)
  assert f"- Data: the on-policy response stores `{first}`, `{second}` (" in data_text
  prompts_text, _ = feature_card_text.data_texts({**facts, "store": first}, {})
  assert "user turns" not in prompts_text
  with pytest.raises(sd.StageError, match="names a store twice"):
    fd.load_sequences(dataclasses.replace(both, store=f"{both.store},{stores[0][0].root}"))
  with pytest.raises(sd.StageError, match="feature shards are of one store"):
    run_pipeline(fd.FeatureDraftRecipe(dataclasses.replace(
      both, stages="features", features="shards", shards=str(tmp_path / "features"))))  # fmt: skip


def test_the_pipeline_refuses_unknown_stages_and_an_export_without_training(tmp_path):
  from specsample.train.pipeline import PipelineRun, chosen_stages

  recipe = fd.FeatureDraftRecipe(fd.FeatureDraftOptions(work=str(tmp_path), stages="train,vocab"))
  assert chosen_stages(recipe) == ["vocab", "train"]  # the recipe's order, not the flag's
  for stages in ("train,trian", ",", "features"):
    token = td.TokenDraftRecipe(td.TokenDraftOptions(work=str(tmp_path), stages=stages))
    with pytest.raises(sd.StageError, match="the token draft has the stages prompts,generate"):
      chosen_stages(token)
  run = PipelineRun(target=None, tokenizer=None, activations="float32")
  token = td.TokenDraftRecipe(td.TokenDraftOptions(work=str(tmp_path)))
  with pytest.raises(sd.StageError, match="export stage takes the draft of the train stage"):
    token.run_stage("export", run)
  # the feature draft exports its checkpoint's draft when no training ran: none here
  with pytest.raises(sd.StageError, match="export: .*checkpoint.npz does not exist"):
    recipe.run_stage("export", run)


def test_a_target_that_is_not_a_file_is_refused(tmp_path):
  missing = str(tmp_path / "missing.gguf")
  with pytest.raises(sd.StageError, match="missing.gguf' is not a file"):
    sd.load_target("float32", missing)
  recipe = td.TokenDraftRecipe(td.TokenDraftOptions(work=str(tmp_path / "w"), target=missing))
  with pytest.raises(sd.StageError, match="is not a file"):
    run_pipeline(recipe)
