"""Dropping compiled decoding programs that will not run again.

Each call signature of `speculative_generate` / `generate` (shapes, gamma, sampling, rule)
compiles one XLA program, cached for the life of the process. On CPU a program's machine
code lives in memory mappings of its own: about 950 mappings for a 2-layer T5 pair's
speculative loop, 1,600 for 8 layers, growing with depth. Linux caps a process at
`vm.max_map_count` mappings (65,530 by default), and XLA's compiler crashes the process
(SIGSEGV) when a new program cannot be mapped. Code that compiles dozens of settings in
one process, like `specsample bench`'s gamma sweep, drops each setting's programs when it
is done with them.
"""

from __future__ import annotations

from specsample.decoding import autoregressive, speculative


def clear_compiled_programs(*, speculative_only: bool = False) -> None:
  """Drops the cached compiled programs of the speculative loop and, unless
  `speculative_only`, of plain decoding too. Later calls compile again.
  (`specsample.bench.costs.clear_step_programs` drops the step-timing programs.)"""
  programs = [speculative.speculative_program]
  if not speculative_only:
    programs.append(autoregressive.generate_program)
  for program in programs:
    program.clear_cache()
