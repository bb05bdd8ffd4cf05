"""Where a decoding loop's time goes, operation by operation, from XLA's own timings.

The bundled SmolLM2 pair as `load_pair()` gives it (the GGUF's blocks, 8-bit activations,
the feature draft behind prompt lookup) decodes one chat prompt greedily, speculatively
(gamma --gamma) and plainly, --runs times each under `jax.profiler.trace`. XLA's CPU
runtime times every operation it runs (each "thunk": a kernel call, a fused loop, a
conditional); the compiled programs' HLO, dumped beside the trace, names the model code
each came from. The script sums the leaf operations (a conditional's or a loop's own
entry contains its children and is left out) into groups, per iteration of the
speculative loop and per step of the plain one:

  target layers      the target's decoder layers (kernel calls)
  target output      the target's output layer (kernel call)
  target, other      the target's other operations (cache writes, embedding, gathers)
  draft calls        the draft's kernel calls (its layer, fusing map, kept logits)
  draft, other       the draft's other operations (argmax, top probability, gathers)
  loop               everything else in the loop body (lookup, verification, commits)

and the prefill (operations outside the loop) per run. The profiler adds about a
microsecond per operation, so the sums exceed the loops' wall time a little; compare
groups, not totals, with unprofiled timings.

  python scripts/dev/profile_loop_ops.py [--prompt TEXT] [--gamma 3] [--max-new-tokens 128] \
      [--runs 5] [--top 15] [--group "draft, other"]
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import os
import pathlib
import re
import sys
import tempfile

DUMP = tempfile.mkdtemp(prefix="profile_loop_ops_")
if "jax" in sys.modules:
  raise SystemExit("run this script on its own: it sets XLA_FLAGS before JAX starts")
os.environ["XLA_FLAGS"] = (
  os.environ.get("XLA_FLAGS", "") + f" --xla_dump_to={DUMP}/hlo --xla_dump_hlo_as_text"
)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from measuring import MAIN_JOB  # noqa: E402  (scripts/dev, beside this script)

from specsample import SamplingConfig, generate, speculative_generate  # noqa: E402
from specsample.pairs import load_pair  # noqa: E402

LOOPS = {"speculative": "jit__speculative_loop", "plain": "jit__generate_loop"}
KERNEL = "ffi_call"
GROUPS = ("target layers", "target output", "target, other", "draft calls", "draft, other", "loop")


def op_names(module: str) -> dict[str, str]:
  """{HLO instruction name: op_name metadata} of a dumped module's optimized HLO."""
  path = next(pathlib.Path(DUMP, "hlo").glob(f"*{module}.cpu_after_optimizations.txt"))
  names = {}
  for line in path.read_text().splitlines():
    found = re.match(r'\s*(?:ROOT )?%?([\w.\-]+) = .*?op_name="([^"]*)"', line)
    if found:
      names[found.group(1)] = found.group(2)
  return names


def kind_of(thunk: str) -> str:
  """An operation's kind: its name without the instance number ("ffi_call.1525")."""
  return re.sub(r"[.][0-9]+$", "", thunk)


def group_of(thunk: str, op_name: str) -> str | None:
  """The group a leaf operation's time goes to; None for the nesting ones."""
  kind = kind_of(thunk)
  if kind in ("cond", "while", "call", "conditional"):
    return None  # their own entries contain their children's
  if "/while/body/" not in op_name:
    return "prefill"
  path = op_name.split("/while/body/", 1)[1]
  if "FeatureDraftNetwork" in path:
    return "draft calls" if kind == KERNEL else "draft, other"
  if "DecoderOnlyNetwork" in path:
    if kind != KERNEL:
      return "target, other"
    return "target layers" if "/blocks_" in path else "target output"
  return "loop"


def profile(runs_of: dict, runs: int) -> list[dict]:
  """The trace events of `runs` calls of each function in `runs_of`, alternated (after two
  untimed calls of each), so that both loops see the same state of a shared machine."""
  for run in runs_of.values():
    run()
    run()
  directory = pathlib.Path(DUMP, "trace")
  with jax.profiler.trace(str(directory)):
    for _ in range(runs):
      for run in runs_of.values():
        run()
  trace = next(directory.rglob("*.trace.json.gz"))
  return [e for e in json.load(gzip.open(trace))["traceEvents"] if e.get("ph") == "X"]


def summarize(
  events, module: str, runs: int, per: float, unit: str, top: int, only: str | None = None
) -> None:
  """Prints the groups' times per `unit` and the `top` costliest operations (of group
  `only` alone when given)."""
  names = op_names(module)
  groups, leaves, counts = collections.Counter(), collections.Counter(), collections.Counter()
  for event in events:
    if event.get("args", {}).get("hlo_module") != module:
      continue
    group = group_of(event["name"], names.get(event["name"], ""))
    if group is None:
      continue
    groups[group] += event["dur"]
    if group != "prefill" and only in (None, group):
      path = names.get(event["name"], event["name"]).split("/while/body/")[-1]
      key = f"{re.sub(r'blocks_[0-9]+', 'blocks_N', path)} ({kind_of(event['name'])})"
      leaves[key] += event["dur"]
      counts[key] += 1
  print(f"| group | ms per {unit} |\n|---|---|")
  for group in GROUPS:
    print(f"| {group} | {groups[group] / 1e3 / per:.3f} |")
  loop = sum(d for g, d in groups.items() if g != "prefill")
  print(f"| all of the loop body | {loop / 1e3 / per:.3f} |")
  print(f"| prefill, ms per run | {groups['prefill'] / 1e3 / runs:.2f} |\n")
  where = "the loop body" if only is None else f"the group {only!r}"
  print(f"the {top} costliest operations of {where}, ms per {unit} (calls per {unit}):")
  for key, d in leaves.most_common(top):
    print(f"  {d / 1e3 / per:7.3f}  ({counts[key] / per:5.1f})  {key[-120:]}")
  print()


def main() -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--prompt", default=MAIN_JOB)
  parser.add_argument("--gamma", type=int, default=3)
  parser.add_argument("--max-new-tokens", type=int, default=128)
  parser.add_argument("--runs", type=int, default=5)
  parser.add_argument("--top", type=int, default=15)
  parser.add_argument("--group", choices=GROUPS, default=None, help="list this group's operations")
  args = parser.parse_args()
  pair = load_pair()
  chat = pair.tokenizer.apply_chat_template([{"role": "user", "content": args.prompt}])
  prompts, lengths = jnp.asarray([chat], jnp.int32), jnp.asarray([len(chat)], jnp.int32)
  greedy = SamplingConfig(temperature=0.0)
  common = {"prompt_lengths": lengths, "max_new_tokens": args.max_new_tokens, "sampling": greedy}
  outputs = {}

  def speculative():
    outputs["speculative"] = jax.block_until_ready(
      speculative_generate(pair.target, pair.draft, prompts, gamma=args.gamma, **common)
    )

  def plain():
    outputs["plain"] = jax.block_until_ready(generate(pair.target, prompts, **common))

  events = profile({"speculative": speculative, "plain": plain}, args.runs)
  spec, ref = outputs["speculative"], outputs["plain"]
  tokens = int(ref.lengths[0])
  iterations = int(spec.stats.target_calls)
  same = bool((spec.tokens == ref.tokens).all())
  print(
    f"{len(chat)}-token prompt, {tokens} new tokens, gamma {args.gamma}, {iterations} "
    f"iterations; speculative output = plain: {same}; {args.runs} profiled runs each, alternated\n"
  )
  print("speculative loop")
  summarize(events, LOOPS["speculative"], args.runs, args.runs * iterations,
            "iteration", args.top, args.group)  # fmt: skip
  print("plain loop")
  summarize(events, LOOPS["plain"], args.runs, args.runs * tokens, "step", args.top, args.group)
  return 0


if __name__ == "__main__":
  sys.exit(main())
