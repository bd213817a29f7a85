"""The graph form of a decode step (graph_plan.py), on the CPU: executed from the device
tensors alone, the way the GPU kernels read them (the paged pass from lengths, skips and
the shifted table; the dense pass from cu_q/cu_k/seqused_k over every group, padding
included; the merge from the scatter index, -1 skipped), it must equal each row's full
causal attention; and every step of N rows must land at the same addresses with the
same shapes, which is what lets a captured graph replay it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from granikv_engine.attention.reference import (
    full_attention,
    hot_prefix_attention,
    merge_attn_states,
    paged_attention,
)
from granikv_engine.dispatcher import Backend
from granikv_engine.graph_plan import GraphBuffers, GraphLimits
from granikv_engine.step_plan import KernelPlan, StepPlan

ARENA = (1, 2001)
H, HKV, D = 4, 2, 16
SLOTS = 6000


def _step(rng: np.random.Generator, teams: list[tuple[int, int]], members: list[int],
          plain: int, own: tuple[int, int], pad: int, width: int
          ) -> tuple[StepPlan, list[list[int]]]:
    """A decode step: ``members[t]`` rows on team t's prefix ``teams[t] = (start, len)``
    (interleaved), ``plain`` rows with no prefix, then ``pad`` padded rows (no query,
    no keys: what the runner adds for a FULL graph). Returns the plan and each row's
    slots in position order."""
    rows: list[list[int]] = []
    cold = iter(rng.permutation(np.arange(ARENA[1], SLOTS)).tolist())
    kinds = [t for t, m in enumerate(members) for _ in range(m)] + [-1] * plain
    for t in rng.permutation(kinds).tolist():
        n_own = int(rng.integers(*own))
        hot = list(range(teams[t][0], sum(teams[t]))) if t >= 0 else []
        rows.append(hot + [next(cold) for _ in range(n_own)])
    b = len(rows) + pad
    bt = torch.zeros(b, width, dtype=torch.int32)
    for i, r in enumerate(rows):
        bt[i, :len(r)] = torch.tensor(r, dtype=torch.int32)
        bt[i, len(r):] = torch.from_numpy(rng.integers(1, SLOTS, width - len(r)))  # stale
    seq = torch.tensor([len(r) for r in rows] + [0] * pad, dtype=torch.int32)
    qsl = torch.tensor(list(range(len(rows) + 1)) + [len(rows)] * pad, dtype=torch.int32)
    return StepPlan.build(qsl, seq, bt, ARENA, min_hot_len=4), rows


def run_device_form(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kp: KernelPlan,
                    scale: float) -> torch.Tensor:
    d = kp.cascade_dev
    assert d is not None and d.gather is not None and not d.identity
    seq = kp.kv_seq_lens + kp.kv_pos_start
    indptr, indices = kp.kv_csr()
    out, lse = paged_attention(q, k, v, kp.query_start_loc, indptr, indices,
                               kp.kv_pos_start, seq, scale)
    qc = q[d.gather.long()]
    cu_q, cu_k, used = d.cu_q.tolist(), d.cu_k.tolist(), d.seqused_k.tolist()
    scatter = kp.cascade_q_index.tolist()
    for g in range(len(used)):  # every group, the empty padding ones included
        a, b = cu_q[g], cu_q[g + 1]
        assert b - a <= d.max_q and used[g] <= d.max_k
        if b == a:
            assert used[g] == 0
            continue
        slab = slice(cu_k[g], cu_k[g] + used[g])
        o_h, l_h = hot_prefix_attention(qc[a:b], k[slab], v[slab], scale)
        for j in range(a, b):
            t = scatter[j]
            assert t >= 0
            out[t:t + 1], _ = merge_attn_states(out[t:t + 1], lse[:, t:t + 1],
                                                o_h[j - a:j - a + 1], l_h[:, j - a:j - a + 1])
    assert all(t == -1 for t in scatter[cu_q[-1]:])  # padding merges nothing
    return out


def _check(plan: StepPlan, rows: list[list[int]], kp: KernelPlan, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    k = torch.randn(SLOTS, HKV, D, generator=g, dtype=torch.float64)
    v = torch.randn(SLOTS, HKV, D, generator=g, dtype=torch.float64)
    q = torch.randn(plan.num_rows, H, D, generator=g, dtype=torch.float64)
    out = run_device_form(q, k, v, kp, D ** -0.5)
    for i, r in enumerate(rows):
        ref, _ = full_attention(q[i:i + 1], k[r], v[r], D ** -0.5)
        torch.testing.assert_close(out[i:i + 1], ref, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("seed", range(4))
def test_the_graph_form_equals_full_attention(seed: int) -> None:
    rng = np.random.default_rng(seed)
    teams = [(1, 40), (300, 64), (900, 17)]
    plan, rows = _step(rng, teams, [5, 7, 3], plain=4, own=(1, 30), pad=5, width=128)
    choices = [Backend.CASCADE, Backend.PAGED, Backend.CASCADE]  # by HOT start
    bufs = GraphBuffers(GraphLimits(rows=64, width=128, groups=4, hot_len=2000),
                        torch.device("cpu"))
    assert bufs.fits(plan)
    kp = bufs.lower(plan, choices)
    assert len(kp.cascade) == 2 and kp.cascade_dev is not None
    assert kp.cascade_dev.cu_q.tolist() == [0, 5, 8, 8, 8]  # then empty groups
    assert kp.cascade_dev.seqused_k.tolist() == [40, 17, 0, 0]
    _check(plan, rows, kp, seed)


def test_every_step_of_n_rows_lands_at_the_same_addresses() -> None:
    """Two steps of one graph size, one with three cascade groups and one with none,
    both lowered: each tensor a kernel reads has the same address, shape and strides,
    and each is still correct after the other was lowered into the same buffers."""
    rng = np.random.default_rng(7)
    bufs = GraphBuffers(GraphLimits(rows=32, width=96, groups=3, hot_len=2000),
                        torch.device("cpu"))
    a, rows_a = _step(rng, [(1, 30), (500, 50), (1200, 20)], [4, 6, 2], plain=2,
                      own=(1, 40), pad=2, width=96)
    b, rows_b = _step(rng, [(700, 60)], [10], plain=3, own=(5, 30), pad=3, width=96)
    assert a.num_rows == b.num_rows == 16
    ka = bufs.lower(a, [Backend.CASCADE] * 3)
    views_a = _kernel_views(ka)
    _check(a, rows_a, ka, 1)
    kb = bufs.lower(b, [Backend.PAGED])
    assert kb.cascade == () and kb.cascade_dev is not None
    assert _kernel_views(kb) == views_a
    assert (ka.max_q, ka.max_kv, ka.cascade_dev.max_q, ka.cascade_dev.max_k) == (
        kb.max_q, kb.max_kv, kb.cascade_dev.max_q, kb.cascade_dev.max_k)
    _check(b, rows_b, kb, 2)


def _kernel_views(kp: KernelPlan) -> list[tuple[int, tuple[int, ...], tuple[int, ...]]]:
    d = kp.cascade_dev
    assert d is not None and d.gather is not None
    ts = [kp.kv_seq_lens, kp.kv_pos_start, kp.block_table, kp.cascade_q_index, d.cu_q,
          d.cu_k, d.seqused_k, d.gather]
    return [(t.data_ptr(), tuple(t.shape), t.stride()) for t in ts]


def test_steps_the_graph_form_cannot_take_are_refused() -> None:
    rng = np.random.default_rng(3)
    bufs = GraphBuffers(GraphLimits(rows=32, width=128, groups=1, hot_len=2000),
                        torch.device("cpu"))
    plan, _ = _step(rng, [(1, 40), (300, 64)], [3, 3], plain=0, own=(1, 9), pad=0,
                    width=128)
    with pytest.raises(ValueError, match="does not fit"):
        bufs.lower(plan, [Backend.CASCADE, Backend.CASCADE])  # two groups, room for one
    bufs.lower(plan, [Backend.CASCADE, Backend.PAGED])
    prefill = StepPlan.build(torch.tensor([0, 3], dtype=torch.int32),
                             torch.tensor([44], dtype=torch.int32), plan.block_table[:1],
                             ARENA, min_hot_len=4)
    assert not bufs.fits(prefill)  # three queries in a row: not a decode step
    wide = GraphBuffers(GraphLimits(rows=4, width=128, groups=2, hot_len=2000),
                        torch.device("cpu"))
    assert not wide.fits(plan)  # six rows, room for four


def test_the_cpu_ops_run_a_graph_form_plan_like_the_eager_one() -> None:
    """A step cleared for a FULL graph that the runner then runs without one (or the CPU
    build) executes the graph form through TorchOps: the same output as the eager
    lowering of the same step."""
    from granikv_engine.vllm_plugin.worker.attn_ops import TorchOps

    rng = np.random.default_rng(11)
    plan, rows = _step(rng, [(1, 40), (300, 64)], [6, 5], plain=3, own=(1, 20), pad=4,
                       width=128)
    choices = [Backend.CASCADE, Backend.CASCADE]
    bufs = GraphBuffers(GraphLimits(rows=32, width=128, groups=4, hot_len=2000),
                        torch.device("cpu"))
    g = torch.Generator().manual_seed(5)
    k = torch.randn(SLOTS, HKV, D, generator=g, dtype=torch.float64)
    v = torch.randn(SLOTS, HKV, D, generator=g, dtype=torch.float64)
    q = torch.randn(len(rows), H, D, generator=g, dtype=torch.float64)
    graph_out, eager_out = torch.empty_like(q), torch.empty_like(q)
    TorchOps().forward(q, k, v, bufs.lower(plan, choices), D ** -0.5, graph_out)
    TorchOps().forward(q, k, v, plan.lower(choices), D ** -0.5, eager_out)
    torch.testing.assert_close(graph_out, eager_out, rtol=1e-12, atol=1e-12)
