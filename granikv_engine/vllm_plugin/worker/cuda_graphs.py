"""FULL CUDA graphs for GraniKV's decode steps.

vLLM's V1 model runner keeps a step out of FULL graphs when its own (batch-global)
cascade attention is on for that step: ``_compute_cascade_attn_prefix_lens`` returns
prefix lengths instead of None, and the runner then dispatches the step to PIECEWISE
graphs. GraniKV turns vLLM's cascade off (``enable.py``) and takes that hook over on
runners with GraniKV builders and FULL graphs: before the runner picks the step's graph
mode, every GraniKV builder analyses the step on the host (``analyse_step``: the same
grouping and dispatcher as its ``build``; one ``StepAnalysis`` with the step's mode).
- No group goes to the cascade: None; a uniform decode step may replay a FULL graph.
- Some group does, and the step is a decode step whose graph (the capture size the
  runner pads it to) has at least ``cascade_graph_min_rows`` rows, with at most
  ``cascade_graph_groups`` cascade groups: None as well. Graphs of that size were
  captured in the graph form (``graph_plan.py``), which carries the cascade.
- Otherwise (a builder's mode is PIECEWISE): prefix lengths of 0, and every builder
  runs the step PIECEWISE (``run_piecewise``), its attention eagerly.
When a step may replay a FULL graph, the builders lower it so that the graph is right
for it: the graph form for large graphs, the paged kernel only (correct for any step:
it reads every slot, HOT ones included, through the block table) for small ones.

Every tensor-parallel rank sees the same scheduler output, host block table and
calibration table, so every rank makes the same choice.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from granikv_engine.vllm_plugin.worker.metadata_builder import StepMode


def install(runner_cls: Any) -> None:
    """Wrap the runner class's hook once; runners without GraniKV graphs keep stock's."""
    if getattr(runner_cls, "_granikv_graphs_hooked", False):
        return
    stock = runner_cls._compute_cascade_attn_prefix_lens

    @functools.wraps(stock)
    def _compute_cascade_attn_prefix_lens(self: Any, num_scheduled_tokens: np.ndarray,
                                          num_computed_tokens: np.ndarray,
                                          num_common_prefix_blocks: list[int]
                                          ) -> list[list[int]] | None:
        builders = getattr(self, "_granikv_graph_builders", None)
        if not builders:
            return stock(self, num_scheduled_tokens, num_computed_tokens,
                         num_common_prefix_blocks)
        return eager_prefix_lens(self, builders, num_scheduled_tokens, num_computed_tokens)

    runner_cls._compute_cascade_attn_prefix_lens = _compute_cascade_attn_prefix_lens
    runner_cls._granikv_graphs_hooked = True


def eager_prefix_lens(runner: Any, builders: list[Any], num_scheduled: np.ndarray,
                      num_computed: np.ndarray) -> list[list[int]] | None:
    """The hook's answer: None (FULL graphs allowed) or all-zero prefix lengths (the
    step runs PIECEWISE). Every builder is asked, then all get the step's one answer."""
    steps = [b.analyse_step(num_scheduled, num_computed) for b in builders]
    if not any(s is not None and s.mode is StepMode.PIECEWISE for s in steps):
        return None
    for b in builders:
        b.run_piecewise()
    return [[0] * len(groups) for groups in runner.attn_groups]


def enable(runner: Any) -> int:
    """After KV-cache init (graph mode resolved): take the hook over on this runner when
    it has GraniKV builders and FULL graphs. Returns the number of builders."""
    from granikv_engine.vllm_plugin.worker.runner_binding import runner_builders

    builders = [b for _, b in runner_builders(runner) if b.cfg.full_cudagraphs]
    mode = getattr(getattr(runner, "compilation_config", None), "cudagraph_mode", None)
    if not builders or mode is None or not mode.has_full_cudagraphs():
        return 0
    runner._granikv_graph_builders = builders
    runner.cascade_attn_enabled = True  # the runner consults the hook only when on
    return len(builders)
