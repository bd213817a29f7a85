"""FULL CUDA graphs for paged-only decode steps (``cuda_graphs.py``): the decision the
model-runner hook makes before the runner picks a step's graph mode, and what the
builder then lowers. Pure host logic, checked on the CPU; the GPU replay itself is
checked in tests/gpu."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch

from granikv_engine.config import GraniKVConfig
from granikv_engine.dispatcher import AttnShape, Backend, Dispatcher
from granikv_engine.stats import DispatchCounters
from granikv_engine.step_plan import PinnedStager
from granikv_engine.vllm_plugin.worker import cuda_graphs
from granikv_engine.vllm_plugin.worker.metadata_builder import (
    GraniKVMetadataBuilder,
    StepAnalysis,
    StepMode,
)

ARENA = (1, 1001)


def _builder(table: torch.Tensor | None, force: Backend | None, graphs: bool = True,
             max_capture: int = 64, **cfg: Any) -> GraniKVMetadataBuilder:
    b = object.__new__(GraniKVMetadataBuilder)
    b.cfg = GraniKVConfig(enabled=True, min_hot_len=16, **cfg)
    b.arena = ARENA
    b.dispatcher = Dispatcher(AttnShape(num_q_heads=4, num_kv_heads=2, head_dim=64,
                                        dtype_bytes=4, hidden_size=256), force=force)
    b.counters = DispatchCounters()
    b.stage = PinnedStager(torch.device("cpu"), 256)
    b.host_block_table = None if table is None else (lambda: table)
    b._warned_unbound = True
    b._step = None
    b._ops = None
    b._sched_buf = None
    b._graph_bufs = None
    b._dense_sched = None
    b.max_splits = 32
    b.device = torch.device("cpu")
    mode = SimpleNamespace(has_full_cudagraphs=lambda: graphs)
    sizes = [s for s in (1, 2, 4, 8, 16, 32, 64, 128) if s <= max_capture]
    b.vllm_config = SimpleNamespace(
        compilation_config=SimpleNamespace(cudagraph_mode=mode,
                                           max_cudagraph_capture_size=max_capture,
                                           cudagraph_capture_sizes=sizes),
        scheduler_config=SimpleNamespace(max_num_seqs=64))
    return b


def _table(rows: int, hot: int, own: int) -> torch.Tensor:
    """rows x (hot + own): a HOT run 1..hot, then COLD slots past the arena."""
    t = torch.zeros(rows, hot + own + 4, dtype=torch.int32)
    for i in range(rows):
        t[i, :hot] = torch.arange(1, hot + 1)
        t[i, hot:hot + own] = torch.arange(2000 + 100 * i, 2000 + 100 * i + own)
    return t


def _decode(rows: int, hot: int, own: int) -> tuple[np.ndarray, np.ndarray]:
    """A decode step: one new token per row after hot + own - 1 computed ones."""
    return np.ones(rows, dtype=np.int32), np.full(rows, hot + own - 1, dtype=np.int32)


@pytest.mark.parametrize("force,eager", [(Backend.CASCADE, True), (Backend.PAGED, False)])
def test_the_step_goes_eager_exactly_when_a_group_runs_the_cascade(force: Backend,
                                                                   eager: bool) -> None:
    b = _builder(_table(8, 64, 10), force)
    runner = SimpleNamespace(attn_groups=[[object(), object()]])
    got = cuda_graphs.eager_prefix_lens(runner, [b], *_decode(8, 64, 10))
    assert got == ([[0, 0]] if eager else None)
    assert b._step is not None
    assert b._step.mode is (StepMode.PIECEWISE if eager else StepMode.FULL)


def test_rows_without_a_hot_run_never_keep_a_step_out_of_full_graphs() -> None:
    t = _table(4, 0, 30)  # no HOT slots at all: no group, nothing for the cascade
    assert cuda_graphs.eager_prefix_lens(SimpleNamespace(attn_groups=[[1]]),
                                         [_builder(t, Backend.CASCADE)],
                                         *_decode(4, 0, 30)) is None


def test_one_builder_wanting_the_cascade_makes_every_builder_eager() -> None:
    cascade, paged = _builder(_table(8, 64, 10), Backend.CASCADE), _builder(
        _table(8, 64, 10), Backend.PAGED)
    got = cuda_graphs.eager_prefix_lens(SimpleNamespace(attn_groups=[[1], [2]]),
                                        [paged, cascade], *_decode(8, 64, 10))
    assert got == [[0], [0]]
    assert paged._step is not None and cascade._step is not None
    assert paged._step.mode is cascade._step.mode is StepMode.PIECEWISE
    assert paged._step.host is not None  # its analysis stays, for build


def test_without_the_host_block_table_the_step_stays_eager() -> None:
    b = _builder(None, Backend.PAGED)
    assert b.analyse_step(*_decode(2, 64, 10)) == StepAnalysis(StepMode.PIECEWISE)


def _cam(table: torch.Tensor, rows: int, hot: int, own: int) -> Any:
    seq = torch.full((rows,), hot + own, dtype=torch.int32)
    qsl = torch.arange(rows + 1, dtype=torch.int32)
    return SimpleNamespace(num_reqs=rows, num_actual_tokens=rows, query_start_loc=qsl,
                           query_start_loc_cpu=qsl, seq_lens=seq, _seq_lens_cpu=seq,
                           seq_lens_cpu_upper_bound=seq, block_table_tensor=table,
                           slot_mapping=torch.arange(rows), max_seq_len=hot + own,
                           max_query_len=1)


def test_a_step_cleared_for_full_graphs_is_lowered_to_the_paged_kernel_only() -> None:
    """The dispatcher would send the group to the cascade; the hook cleared the step for
    FULL graphs (its own analysis found none, e.g. from one token fewer): the builder
    must not lower a cascade the replayed graph would never run."""
    t = _table(8, 64, 10)
    b = _builder(t, Backend.CASCADE)
    b._step = StepAnalysis(StepMode.FULL)
    meta = b.build(0, _cam(t, 8, 64, 10))
    assert meta.plan.cascade_dev is None and meta.plan.cascade == ()
    assert [c.backend for c in meta.choices] == [Backend.PAGED]
    assert meta.choices[0].source == "graph" and b.counters.graph_steps == 1
    b.run_piecewise()  # the hook made the step eager: the cascade runs
    meta = b.build(0, _cam(t, 8, 64, 10))
    assert meta.plan.cascade_dev is not None
    assert [c.backend for c in meta.choices] == [Backend.CASCADE]


def test_a_step_nobody_prepared_is_paged_only_when_a_full_graph_could_replay_it() -> None:
    t = _table(8, 64, 10)
    small = _builder(t, Backend.CASCADE, max_capture=64)  # 8 tokens: graph-sized
    assert small.build(0, _cam(t, 8, 64, 10)).plan.cascade_dev is None
    big = _builder(t, Backend.CASCADE, max_capture=4)  # 8 tokens: never a FULL graph
    assert big.build(0, _cam(t, 8, 64, 10)).plan.cascade_dev is not None
    off = _builder(t, Backend.CASCADE, graphs=False)
    assert off.build(0, _cam(t, 8, 64, 10)).plan.cascade_dev is not None


def test_the_hook_is_taken_over_only_with_graniKV_builders_and_full_graphs() -> None:
    class Runner:
        def __init__(self, builders: list[Any], full: bool) -> None:
            self.attn_groups = [[SimpleNamespace(metadata_builders=builders)]]
            self.compilation_config = SimpleNamespace(
                cudagraph_mode=SimpleNamespace(has_full_cudagraphs=lambda: full))
            self.cascade_attn_enabled = False

        def _compute_cascade_attn_prefix_lens(self, *a: Any) -> str:
            return "stock"

    cuda_graphs.install(Runner)
    b = _builder(_table(2, 64, 10), Backend.CASCADE)
    plain = Runner([object()], True)
    assert cuda_graphs.enable(plain) == 0 and plain.cascade_attn_enabled is False
    assert plain._compute_cascade_attn_prefix_lens(*_decode(2, 64, 10), [0]) == "stock"
    eager_only = Runner([b], False)
    assert cuda_graphs.enable(eager_only) == 0
    mine = Runner([b], True)
    assert cuda_graphs.enable(mine) == 1 and mine.cascade_attn_enabled is True
    assert mine._compute_cascade_attn_prefix_lens(*_decode(2, 64, 10), [0]) == [[0]]


def test_build_reuses_the_hooks_analysis_of_the_same_step(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    """analyse_step and build analyse one step each; build takes analyse_step's result
    when its host inputs are the same, and analyses again when they are not."""
    from granikv_engine import step_plan

    calls = []
    real = step_plan.group_rows
    monkeypatch.setattr(step_plan, "group_rows", lambda *a: calls.append(1) or real(*a))
    t = _table(8, 64, 10)
    b = _builder(t, Backend.CASCADE, graphs=False)
    step = b.analyse_step(*_decode(8, 64, 10))
    assert step is not None and step.mode is StepMode.PIECEWISE
    meta = b.build(0, _cam(t, 8, 64, 10))
    assert calls == [] and meta.plan.cascade_dev is not None
    b.analyse_step(*_decode(8, 64, 10))
    other = _cam(t, 8, 64, 9)  # one token fewer: not the step analyse_step saw
    meta = b.build(0, other)
    assert calls == [1] and meta.plan.cascade_dev is not None
    b.build(0, _cam(t, 8, 64, 10))  # nothing prepared: analysed again
    assert calls == [1, 1]


def _teams(rows: int, hots: list[int], own: int) -> torch.Tensor:
    """Row i on team i % len(hots): team t's HOT run starts at 1 + 100 t."""
    t = torch.zeros(rows, max(hots) + own + 4, dtype=torch.int32)
    for i in range(rows):
        n = hots[i % len(hots)]
        t[i, :n] = torch.arange(1, n + 1) + 100 * (i % len(hots))
        t[i, n:n + own] = torch.arange(2000 + 100 * i, 2000 + 100 * i + own)
    return t


@pytest.mark.parametrize("rows,graph", [(32, True), (12, True), (6, False)])
def test_a_decode_step_keeps_its_cascade_in_a_full_graph_of_at_least_16_rows(
        rows: int, graph: bool) -> None:
    """12 rows replay the graph of 16 (the runner pads to the next capture size), which
    was captured in the graph form; 6 rows replay the graph of 8, paged only."""
    b = _builder(_table(rows, 64, 10), Backend.CASCADE)
    got = cuda_graphs.eager_prefix_lens(SimpleNamespace(attn_groups=[[1]]), [b],
                                        *_decode(rows, 64, 10))
    assert (got is None) is graph and b._step is not None
    assert b._step.mode is (StepMode.FULL_CASCADE if graph else StepMode.PIECEWISE)


def test_steps_the_graph_form_cannot_carry_stay_eager() -> None:
    runner = SimpleNamespace(attn_groups=[[1]])
    two = _teams(32, [64, 48], 10)
    sched, done = np.ones(32, dtype=np.int32), (two > 0).sum(1).numpy().astype(np.int32) - 1
    few = _builder(two, Backend.CASCADE, cascade_graph_groups=1)  # two groups, room for one
    assert cuda_graphs.eager_prefix_lens(runner, [few], sched, done) == [[0]]
    ok = _builder(two, Backend.CASCADE, cascade_graph_groups=2)
    assert cuda_graphs.eager_prefix_lens(runner, [ok], sched, done) is None
    prefill = sched.copy()
    prefill[3] = 2  # one row with two new tokens: not a decode step
    assert cuda_graphs.eager_prefix_lens(runner, [ok], prefill, done - 1) == [[0]]
    off = _builder(two, Backend.CASCADE, cascade_graph_min_rows=0)
    assert cuda_graphs.eager_prefix_lens(runner, [off], sched, done) == [[0]]


def _padded_cam(table: torch.Tensor, rows: int, pad: int, hot: int, own: int) -> Any:
    """A decode step of ``rows`` rows padded to ``rows + pad`` for a FULL graph: the
    padded rows have no query and no keys, as the runner leaves them."""
    seq = torch.tensor([hot + own] * rows + [0] * pad, dtype=torch.int32)
    qsl = torch.tensor(list(range(rows + 1)) + [rows] * pad, dtype=torch.int32)
    return SimpleNamespace(num_reqs=rows + pad, num_actual_tokens=rows + pad,
                           query_start_loc=qsl, query_start_loc_cpu=qsl, seq_lens=seq,
                           _seq_lens_cpu=seq, seq_lens_cpu_upper_bound=seq,
                           block_table_tensor=table, slot_mapping=torch.arange(rows + pad),
                           max_seq_len=hot + own, max_query_len=1)


def test_a_padded_graph_step_is_built_in_the_graph_form_from_the_hooks_analysis(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from granikv_engine import step_plan

    calls = []
    real = step_plan.group_rows
    monkeypatch.setattr(step_plan, "group_rows", lambda *a: calls.append(1) or real(*a))
    t = _table(16, 64, 10)
    t[12:] = 7  # stale host rows past the real ones: no keys, so never a HOT run
    b = _builder(t, Backend.CASCADE)
    step = b.analyse_step(*_decode(12, 64, 10))
    assert step is not None and step.mode is StepMode.FULL_CASCADE
    meta = b.build(0, _padded_cam(t, 12, 4, 64, 10))
    assert calls == []  # the hook's analysis of the 12 rows, extended by 4 padded ones
    d = meta.plan.cascade_dev
    assert d is not None and d.gather is not None and not d.identity
    assert [c.backend for c in meta.choices] == [Backend.CASCADE]
    assert meta.plan.cascade_q_index.tolist() == list(range(12)) + [-1] * 4
    assert meta.plan.kv_seq_lens.tolist() == [10] * 12 + [0] * 4
    assert b.counters.graph_steps == 1 and b.counters.graph_cascade_steps == 1


def test_cascade_groups_past_the_graphs_limit_run_the_paged_kernel() -> None:
    """The hook cleared the step (its own analysis fit); build's analysis of what the
    runner then handed it does not: the groups past the limit run the paged kernel."""
    t = _teams(32, [64, 48, 32], 10)
    b = _builder(t, Backend.CASCADE, cascade_graph_groups=2)
    b._step = StepAnalysis(StepMode.FULL_CASCADE)
    seq = (t > 0).sum(1).to(torch.int32)
    qsl = torch.arange(33, dtype=torch.int32)
    cam = SimpleNamespace(num_reqs=32, num_actual_tokens=32, query_start_loc=qsl,
                          query_start_loc_cpu=qsl, seq_lens=seq, _seq_lens_cpu=seq,
                          seq_lens_cpu_upper_bound=seq, block_table_tensor=t,
                          slot_mapping=torch.arange(32), max_seq_len=int(seq.max()),
                          max_query_len=1)
    meta = b.build(0, cam)
    assert [c.backend for c in meta.choices] == [Backend.CASCADE, Backend.CASCADE,
                                                 Backend.PAGED]
    assert meta.choices[2].source == "graph" and len(meta.plan.cascade) == 2
    assert meta.plan.cascade_dev is not None and meta.plan.cascade_dev.seqused_k.numel() == 2
