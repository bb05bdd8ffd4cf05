"""`specsample translate` / `generate` end to end, on a stand-in bundle made here.

The stand-in has the layout of specsample/bundled/ende (Hugging Face T5 directories,
spiece.model, metrics.json) with tiny random models and a SentencePiece model trained on
the frozen English->German test sample, so the whole command path runs offline: loading,
tokenization, speculative vs autoregressive decoding, timing, the trace.
"""

from __future__ import annotations

import json
import pathlib

import pytest
import sentencepiece as spm
from tiny_models import tiny_config

import specsample.bundled as bundled
from specsample.checkpoints import save_hf_t5
from specsample.cli import main
from specsample.cli.compare import compare
from specsample.core import SamplingConfig
from specsample.data.gettext_pairs import read_tsv
from specsample.decoding import SpeculativeSettings
from specsample.models.t5 import T5
from specsample.pairs import load_pair

SAMPLE = pathlib.Path(__file__).parent / "data" / "ende_test_sample.tsv"


@pytest.fixture(scope="module")
def stand_in_bundle(tmp_path_factory) -> pathlib.Path:
  directory = tmp_path_factory.mktemp("ende")
  corpus = directory / "corpus.txt"
  lines = [side for pair in read_tsv(SAMPLE) for side in pair] + [bundled.TASK_PREFIX.strip()]
  corpus.write_text("\n".join(lines))
  spm.SentencePieceTrainer.train(
    input=str(corpus), model_prefix=str(directory / "spiece"), vocab_size=300,
    model_type="unigram", pad_id=0, eos_id=1, unk_id=2, bos_id=-1,
    user_defined_symbols=["%s", "{0}"], hard_vocab_limit=False,
  )  # fmt: skip
  vocab = spm.SentencePieceProcessor(model_file=str(directory / "spiece.model")).GetPieceSize()
  target = T5.init_random(tiny_config(vocab=vocab, d_model=24, num_decoder_layers=3), seed=0)
  draft = T5.init_random(tiny_config("t5.1.0", vocab=vocab, d_model=8, mlp_dim=16), seed=1)
  save_hf_t5(target, directory / "target", dtype="float16")
  save_hf_t5(draft, directory / "draft", dtype="float16")
  (directory / "metrics.json").write_text(json.dumps({"recommended_gamma": 3}))
  return directory


@pytest.fixture
def bundle(stand_in_bundle, monkeypatch) -> pathlib.Path:
  monkeypatch.setattr(bundled, "BUNDLE_DIR", stand_in_bundle)
  return stand_in_bundle


def test_greedy_speculative_translation_equals_target_greedy_for_every_sample(bundle):
  pair = load_pair("bundled:ende")  # the stand-in bundle's pair, its gamma and prefix
  target, draft, vocab = pair.target, pair.draft, pair.tokenizer
  assert pair.gamma == bundled.recommended_gamma() == 3 and pair.prefix == bundled.TASK_PREFIX
  sentences = [english for english, _ in read_tsv(SAMPLE)]
  assert len(sentences) == 48
  prompts = [vocab.encode(pair.prefix + sentence) for sentence in sentences]
  for gamma in (3, 5):
    settings = SpeculativeSettings(gamma=gamma, max_new_tokens=24, sampling=SamplingConfig(0.0))
    comparison = compare(target, draft, prompts, settings, repeats=1)
    assert comparison.identical
    assert comparison.speedup > 0 and comparison.speculative_compile_seconds >= 0


def test_translate_prints_output_statistics_and_writes_the_trace(bundle, capsys, tmp_path):
  trace = tmp_path / "trace.html"
  argv = ["translate", "Could not open file %s", "--max-new-tokens", "12", "--repeats", "1"]
  assert main([*argv, "--trace", str(trace)]) == 0
  captured = capsys.readouterr()
  assert len(captured.out.strip().splitlines()) == 1  # the translation
  assert "alpha" in captured.err and "tokens per target call" in captured.err
  assert "speedup" in captured.err and "compilation" in captured.err
  assert "identical to the target's own greedy output: yes" in captured.err
  page = trace.read_text()
  assert page.count('class="iteration"') >= 1 and 'class="correction"' in page


def test_generate_reads_checkpoints_and_an_input_file(bundle, capsys, tmp_path):
  inputs = tmp_path / "inputs.txt"
  inputs.write_text("Open file\n\nSave all files\nQuit\n")
  code = main(
    [
      "generate",
      "--target", str(bundle / "target"), "--draft", str(bundle / "draft"),
      "--vocab", str(bundle / "spiece.model"), "--prefix", bundled.TASK_PREFIX,
      "--input-file", str(inputs), "--max-new-tokens", "10",
      "--gamma", "3", "--verification", "block", "--temperature", "0.7", "--top-p", "0.9",
      "--repeats", "1", "--no-baseline",
    ]
  )  # fmt: skip
  assert code == 0
  captured = capsys.readouterr()
  assert len(captured.out.strip().splitlines()) == 3  # one line per non-empty input
  assert "alpha" in captured.err and "speedup" not in captured.err


def test_generate_with_bfloat16_weights_stays_greedy_identical(bundle, capsys):
  code = main(
    [
      "generate",
      "--target", str(bundle / "target"), "--draft", str(bundle / "draft"),
      "--vocab", str(bundle / "spiece.model"), "--prefix", bundled.TASK_PREFIX,
      "--weights", "bfloat16", "--max-new-tokens", "10", "--repeats", "1", "--gamma", "2",
      "Open file",
    ]
  )  # fmt: skip
  assert code == 0
  assert "identical to the target's own greedy output: yes" in capsys.readouterr().err


@pytest.mark.parametrize("shape", [["--adaptive", "0.8"], ["--tree", "2"]])
def test_translate_with_adaptive_drafts_and_trees_stays_greedy_identical(bundle, capsys, shape):
  argv = ["translate", "Could not open file %s", "--max-new-tokens", "12", "--repeats", "1"]
  assert main([*argv, "--gamma", "4", *shape]) == 0
  err = capsys.readouterr().err
  assert "alpha" in err and "identical to the target's own greedy output: yes" in err


def test_bench_sweeps_adaptive_drafts_and_trees(bundle, capsys, tmp_path):
  out = tmp_path / "bench"
  argv = [
    "bench", "--input-file", str(SAMPLE), "--num-prompts", "2", "--gammas", "2",
    "--shapes", "token", "adaptive", "tree2", "--temperatures", "1", "--batch-sizes", "1",
    "--max-new-tokens", "6", "--repeats", "1", "--out", str(out),
  ]  # fmt: skip
  assert main(argv) == 0
  assert "| 1 | tree2 | 2 |" in capsys.readouterr().out
  sweep = json.loads((out / "report.json").read_text())["sweep"]
  assert [p["shape"] for p in sweep] == ["token", "adaptive", "tree2"]
  assert all(p["tokens_per_target_call"] >= 1 and p["speculative_seconds"] > 0 for p in sweep)


def test_bad_paths_and_a_missing_bundle_are_reported(capsys, tmp_path, monkeypatch):
  assert main(["generate", "--target", str(tmp_path), "--draft", str(tmp_path), "hi"]) == 2
  assert "not a T5X checkpoint" in capsys.readouterr().err
  monkeypatch.setattr(bundled, "BUNDLE_DIR", tmp_path / "absent")
  assert main(["translate", "hello"]) == 2
  assert "scripts/train/train_bundled.py" in capsys.readouterr().err


def test_gamma_auto_is_tuned_once_and_reported(bundle, capsys):
  argv = ["translate", "Open file", "--gamma", "auto", "--max-new-tokens", "8", "--repeats", "1"]
  assert main(argv) == 0
  err = capsys.readouterr().err
  assert "gamma auto -> " in err and "predicted speedup by gamma" in err
  spoke = "identical to the target's own greedy output: yes" in err, "decoding plainly" in err
  assert sum(spoke) == 1  # speculated (and exact), or said it decodes plainly


def test_a_batch_is_decoded_plainly_where_speculation_does_not_pay(bundle, capsys, monkeypatch):
  """Several prompts and no --gamma: the gamma is tuned, and where no gamma is predicted
  to pay the batch is decoded plainly, said on stderr."""
  from specsample.bench import tuning

  def no_gamma_pays(*args, **kwargs):
    return tuning.GammaChoice(gamma=1, alpha=0.1, c=0.5, r={1: 2.0}, predicted_speedup={1: 0.6})

  monkeypatch.setattr(tuning, "tune_gamma", no_gamma_pays)
  argv = ["translate", "Open file", "Save all files", "--max-new-tokens", "8", "--repeats", "1"]
  assert main(argv) == 0
  captured = capsys.readouterr()
  assert len(captured.out.strip().splitlines()) == 2
  assert "decoding plainly" in captured.err and "plain decoding | " in captured.err
  assert "alpha" not in captured.err.split("gamma auto -> ")[1].split("\n", 1)[1]


def test_bench_command_writes_json_markdown_and_plots(bundle, capsys, tmp_path):
  out = tmp_path / "bench"
  argv = [
    "bench", "--input-file", str(SAMPLE), "--num-prompts", "2", "--gammas", "1,3",
    "--temperatures", "1", "--batch-sizes", "1,2", "--max-new-tokens", "6", "--repeats", "1",
    "--out", str(out),
  ]  # fmt: skip
  assert main(argv) == 0
  captured = capsys.readouterr()
  assert "| T | shape | gamma |" in captured.out and "c = " in captured.out
  report = json.loads((out / "report.json").read_text())
  assert report["num_prompts"] == 2 and report["title"] == "bundled EN->DE pair"
  assert len(report["sweep"]) == 2 * 2 and len(report["batch"]) == 2  # gammas x shapes, batches
  assert report["machine"]["platform"] == "cpu"
  for name in ("report.md", "speedup_vs_gamma.png", "acceptance_histogram.png"):
    assert (out / name).exists()
  assert main(["bench", "--target", str(bundle / "target")]) == 2
  assert "--draft" in capsys.readouterr().err


def test_bench_rejects_bad_gamma_lists():
  with pytest.raises(SystemExit):
    main(["bench", "--gammas", "0"])
  with pytest.raises(SystemExit):
    main(["bench", "--gammas", "a-b"])
