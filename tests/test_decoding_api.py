"""The public decoding API: errors, seeds, one compiled program, statistics, bad logits."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import specsample
from specsample import NonFiniteLogitsError, SamplingConfig, generate, speculative_generate
from specsample.decoding.inputs import make_key
from specsample.models import MarkovLM

TARGET = MarkovLM.random(0, 8, eos_id=1, max_length=64)
DRAFT = MarkovLM.random(1, 8, eos_id=1, max_length=64)
PROMPTS = [[2, 3], [4], [5, 6, 7]]


def test_top_level_exports():
  for name in ("speculative_generate", "generate", "SamplingConfig", "GenerationOutput"):
    assert hasattr(specsample, name)


@pytest.mark.parametrize(
  "kwargs,error,match",
  [
    ({"draft": MarkovLM.random(1, 9)}, ValueError, "vocab_size=9"),
    ({"gamma": 0}, ValueError, "gamma must be >= 1"),
    ({"gamma": 2.5}, TypeError, "gamma"),
    ({"max_new_tokens": 0}, ValueError, "max_new_tokens must be >= 1"),
    ({"sampling": {"temperature": 1.0}}, TypeError, "SamplingConfig"),
    ({"verification": "typical"}, ValueError, "unknown verification"),
    ({"verification": "greedy"}, ValueError, "only exact at temperature 0"),
    ({"prompts": [[2, 8]]}, ValueError, "outside the vocabulary"),
    ({"prompts": [[2, -1]]}, ValueError, "outside the vocabulary"),
    ({"prompts": []}, ValueError, "empty"),
    ({"prompts": [[]]}, ValueError, "1..1 tokens|non-empty"),
    ({"prompts": np.zeros((2, 3, 1), int)}, ValueError, "batch, prompt_length"),
    ({"prompts": np.zeros((2, 3)), "prompt_lengths": None}, TypeError, "integer"),
    ({"prompts": np.zeros((2, 3), int), "prompt_lengths": [3, 4]}, ValueError, "1..3"),
    ({"prompts": [[1] * 60]}, ValueError, "max_length is 64"),
    ({"draft": object()}, TypeError, "lacks `vocab_size`"),
    ({"seed": 1.5}, TypeError, "seed"),
  ],
)
def test_bad_inputs_get_clear_errors_before_compiling(kwargs, error, match, count_compilations):
  call = {"target": TARGET, "draft": DRAFT, "prompts": PROMPTS, "gamma": 3, "max_new_tokens": 8}
  call.update(kwargs)
  target, draft, prompts = call.pop("target"), call.pop("draft"), call.pop("prompts")
  # A PRNG key is made by a tiny program of its own, compiled on its first use in a
  # process (the suite drops compiled programs after every module); what must not be
  # compiled before the error is the decoding loop.
  make_key(0)
  with count_compilations() as compiled, pytest.raises(error, match=match):
    speculative_generate(target, draft, prompts, **call)
  assert compiled == []


def test_sampling_errors_are_raised_when_the_settings_are_made():
  with pytest.raises(ValueError, match="temperature"):
    SamplingConfig(temperature=-1.0)
  with pytest.raises(ValueError, match="top_k"):
    SamplingConfig(top_k=-3)
  with pytest.raises(ValueError, match="top_p"):
    SamplingConfig(top_p=1.01)


def test_generate_checks_its_inputs_too():
  with pytest.raises(ValueError, match="max_new_tokens"):
    generate(TARGET, PROMPTS, max_new_tokens=0)
  with pytest.raises(ValueError, match="max_length is 64"):
    generate(TARGET, [[1] * 60], max_new_tokens=8)


def test_same_seed_same_output_different_seed_different_output():
  kwargs = {"gamma": 3, "max_new_tokens": 12, "sampling": SamplingConfig(temperature=1.0)}
  prompts = PROMPTS * 4
  first = speculative_generate(TARGET, DRAFT, prompts, seed=11, **kwargs)
  again = speculative_generate(TARGET, DRAFT, prompts, seed=11, **kwargs)
  other = speculative_generate(TARGET, DRAFT, prompts, seed=12, **kwargs)
  np.testing.assert_array_equal(first.tokens, again.tokens)
  assert not np.array_equal(first.tokens, other.tokens)
  key_seeded = speculative_generate(TARGET, DRAFT, prompts, seed=jax.random.key(11), **kwargs)
  np.testing.assert_array_equal(first.tokens, key_seeded.tokens)
  plain = generate(TARGET, prompts, max_new_tokens=12, seed=11)
  np.testing.assert_array_equal(
    plain.tokens, generate(TARGET, prompts, max_new_tokens=12, seed=11).tokens
  )
  assert not np.array_equal(
    plain.tokens, generate(TARGET, prompts, max_new_tokens=12, seed=3).tokens
  )


def test_second_call_with_new_prompts_of_the_same_shape_does_not_recompile(count_compilations):
  kwargs = {"gamma": 4, "max_new_tokens": 10, "verification": "block"}
  speculative_generate(TARGET, DRAFT, [[1, 2], [3, 4]], seed=0, **kwargs)
  generate(TARGET, [[1, 2], [3, 4]], max_new_tokens=10, seed=0)
  # New prompts, lengths, seed and even new weights of the same shapes: same program.
  other_target = MarkovLM.random(5, 8, eos_id=1, max_length=64)
  with count_compilations() as compiled:
    out = speculative_generate(other_target, DRAFT, [[5, 6], [7]], seed=3, **kwargs)
    generate(other_target, [[5, 6], [7]], max_new_tokens=10, seed=3)
  assert compiled == [], f"{len(compiled)} recompilations"
  assert out.tokens.shape == (2, 10)
  # A different static setting does compile, so the counter works.
  with count_compilations() as compiled:
    speculative_generate(TARGET, DRAFT, [[5, 6], [7]], gamma=5, max_new_tokens=10)
  assert compiled


@pytest.mark.parametrize("rule,temperature", [("token", 1.0), ("block", 1.0), ("greedy", 0.0)])
def test_the_loop_is_one_while_loop_in_one_program(rule, temperature):
  """The compiled program's entry computation holds exactly one while loop (the
  generation loop; the draft's steps and the samplers' loops are inside it), and no host
  callback: a Python loop around a jitted step would leave none."""
  from specsample.decoding import SpeculativeSettings, speculative_program

  sampling = SamplingConfig(temperature=temperature)
  settings = SpeculativeSettings(gamma=3, max_new_tokens=8, sampling=sampling, rule=rule)
  prompts, lengths = jnp.array([[1, 2]]), jnp.array([2])
  lowered = speculative_program.lower(TARGET, DRAFT, prompts, lengths, jax.random.key(0), settings)
  assert "callback" not in lowered.as_text()  # no host round trips
  compiled = lowered.compile().as_text()
  entry = compiled[compiled.index("ENTRY") :]
  entry = entry[: entry.index("\n}")]
  assert entry.count(" while(") == 1


def test_outputs_and_statistics_are_consistent():
  gamma = 3
  out = speculative_generate(TARGET, DRAFT, PROMPTS * 20, gamma=gamma, max_new_tokens=15, seed=4)
  stats = out.stats
  tokens, lengths = np.asarray(out.tokens), np.asarray(out.lengths)
  histogram = np.asarray(stats.accepted_histogram)
  assert histogram.shape == (gamma + 1,)
  assert histogram.sum() == np.asarray(stats.iterations).sum()
  assert (histogram * np.arange(gamma + 1)).sum() == np.asarray(stats.accepted).sum()
  assert int(stats.draft_calls) == gamma * int(stats.target_calls)
  assert int(stats.target_calls) == np.asarray(stats.iterations).max()
  assert len(set(np.asarray(stats.accepted).tolist())) > 1  # rows accepted different amounts
  for row, length in zip(tokens, lengths):
    assert 1 <= length <= 15
    assert (row[length:] == TARGET.pad_id).all()
    assert (row[: length - 1] != TARGET.eos_id).all()  # EOS only ever ends a row
    assert length == 15 or row[length - 1] == TARGET.eos_id
  # Each row gets at least one token per target call it took part in.
  assert (lengths <= np.asarray(stats.iterations) * (gamma + 1)).all()
  assert (lengths >= np.minimum(np.asarray(stats.iterations), 15)).all()
  assert out.sequences()[0] == tokens[0, : lengths[0]].tolist()


def test_plain_generation_statistics():
  out = generate(TARGET, PROMPTS, max_new_tokens=6)
  assert out.stats.tokens_per_target_call == 1.0
  assert np.isnan(out.stats.alpha)
  np.testing.assert_array_equal(out.stats.iterations, out.lengths)


@pytest.mark.slow
def test_empirical_alpha_matches_analytic_alpha():
  rng = np.random.default_rng(0)
  vocab = 5
  p, q = rng.dirichlet(np.ones(vocab)), rng.dirichlet(np.ones(vocab))
  target = MarkovLM(jnp.asarray(np.tile(np.log(q), (vocab, 1)), jnp.float32))
  draft = MarkovLM(jnp.asarray(np.tile(np.log(p), (vocab, 1)), jnp.float32))
  analytic = float(target.acceptance_probabilities(draft, SamplingConfig()).mean())
  assert analytic == pytest.approx(np.minimum(p, q).sum(), abs=1e-6)
  out = speculative_generate(
    target, draft, [[0]] * 2000, gamma=4, max_new_tokens=20, seed=1, trace=True
  )
  verified = int(np.sum(out.stats.accepted)) + int(np.sum(out.stats.rejected))
  # Binomial standard error of the acceptance rate; tolerance of 5 standard errors.
  tolerance = 5 * np.sqrt(analytic * (1 - analytic) / verified)
  assert out.stats.alpha == pytest.approx(analytic, abs=tolerance)
  # The rule's tokens per iteration, from its verdicts (the statistics stop where each
  # row's output stops, and the budget cuts a row's last iteration).
  verdicts = np.asarray(out.trace.accepted)[np.asarray(out.trace.active)]
  assert 1 + verdicts.mean() == pytest.approx(
    specsample.core.expected_tokens_per_iteration(analytic, 4), abs=0.05
  )


def sticky_model(seed: int, bad_value: float | None = None) -> MarkovLM:
  """Random model where token 5 always follows 5; `bad_value` poisons the logits after 2."""
  table = np.array(MarkovLM.random(seed, 8, eos_id=1).logits_table)
  table[5, :] = -30.0
  table[5, 5] = 30.0
  if bad_value is not None:
    table[2, 3] = bad_value
  return MarkovLM(jnp.asarray(table), eos_id=1)


@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_nan_or_inf_logits_are_reported_not_sampled(value):
  prompts = [[2], [2], [5]]  # rows 0 and 1 need the poisoned logits; row 2 never does
  bad, good = sticky_model(0, value), sticky_model(1)
  with pytest.raises(NonFiniteLogitsError, match=r"the target model .* rows \[0, 1\]\."):
    speculative_generate(bad, good, prompts, gamma=2, max_new_tokens=5)
  with pytest.raises(NonFiniteLogitsError, match=r"the draft model .* rows \[0, 1\]\."):
    speculative_generate(good, bad, prompts, gamma=2, max_new_tokens=5)
  for sampling in (SamplingConfig(), SamplingConfig(temperature=0.0)):
    with pytest.raises(NonFiniteLogitsError, match=r"rows \[0, 1\]\."):
      generate(bad, prompts, max_new_tokens=5, sampling=sampling)
  # Untouched rows decode normally when no row needs the bad logits.
  out = speculative_generate(bad, good, [[5], [5]], gamma=2, max_new_tokens=5)
  assert np.asarray(out.tokens).tolist() == [[5] * 5] * 2


def test_minus_inf_logits_mean_never_this_token():
  out = generate(sticky_model(0, -np.inf), [[2]] * 300, max_new_tokens=1)
  assert 3 not in np.asarray(out.tokens)


def test_clear_compiled_programs_drops_the_cached_loops():
  """The bench drops each setting's program after it (a deep model's sweep would
  otherwise exhaust the process's memory mappings on CPU)."""
  from specsample.decoding import autoregressive, clear_compiled_programs, speculative

  model = MarkovLM.random(0, 5)
  speculative_generate(model, model, [[1, 2]], gamma=2, max_new_tokens=3)
  generate(model, [[1, 2]], max_new_tokens=3)
  assert speculative.speculative_program._cache_size() >= 1
  assert autoregressive.generate_program._cache_size() >= 1
  clear_compiled_programs(speculative_only=True)
  assert speculative.speculative_program._cache_size() == 0
  assert autoregressive.generate_program._cache_size() >= 1
  clear_compiled_programs()
  assert autoregressive.generate_program._cache_size() == 0
  out = speculative_generate(model, model, [[1, 2]], gamma=2, max_new_tokens=3)
  assert int(out.lengths[0]) == 3  # compiles again and still decodes
