"""GPU kernels against the torch references (run on the H200; skipped without CUDA).

Fresh random inputs per case; outputs poisoned with NaN before each run, so an unwritten
element fails; ||out - ref|| / ||ref|| must sit in the bf16 range."""

from __future__ import annotations

import pytest
import torch

from granikv_engine.dispatcher import Backend
from granikv_engine.step_plan import StepPlan
from granikv_engine.vllm_plugin.worker.attn_ops import TorchOps
from granikv_engine.vllm_plugin.worker.kernels.calibrate import capture_graph

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
BF16_TOL = 1e-2


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).norm() / b.double().norm())


def graph_world(rows: int, width: int, slots: int, seed: int, heads: int = 32,
                kv_heads: int = 8, head_dim: int = 128) -> tuple[torch.Tensor, ...]:
    """What a FULL-graph test replays over: random bf16 K/V of ``slots`` slots, then the
    runner's persistent buffers for ``rows`` decode rows (query starts, lengths, block
    table), FA3's schedule buffer, the query and the output."""
    dev, bf16 = torch.device("cuda"), torch.bfloat16
    torch.manual_seed(seed)
    k = torch.randn(slots, kv_heads, head_dim, dtype=bf16, device=dev)
    v = torch.randn_like(k)
    qsl = torch.arange(rows + 1, dtype=torch.int32, device=dev)
    seq = torch.zeros(rows, dtype=torch.int32, device=dev)
    bt = torch.zeros(rows, width, dtype=torch.int32, device=dev)
    sched = torch.zeros(1 + 4 * ((rows + 3) // 4 * 4), dtype=torch.int32, device=dev)
    q = torch.empty(rows, heads, head_dim, dtype=bf16, device=dev)
    return k, v, qsl, seq, bt, sched, q, torch.empty_like(q)


def make_step(prefixes: list[tuple[int, int]], rows: list[tuple[int | None, int, int]],
              seed: int) -> tuple[StepPlan, int]:
    """rows: (prefix index or None, own tokens, query tokens); slots after the prefixes."""
    g = torch.Generator().manual_seed(seed)
    nxt = max(s + n for s, n in prefixes) + 1
    tables, seqs, qs = [], [], []
    for p, own, q in rows:
        hot = list(range(prefixes[p][0], sum(prefixes[p]))) if p is not None else []
        perm = (torch.randperm(own * 2, generator=g)[:own] + nxt).tolist()
        nxt += own * 2
        tables.append(hot + perm)
        seqs.append(len(tables[-1]))
        qs.append(q)
    width = max(seqs)
    bt = torch.zeros(len(rows), width, dtype=torch.int32)
    for i, t in enumerate(tables):
        bt[i, :len(t)] = torch.tensor(t, dtype=torch.int32)
    qsl = torch.tensor([0, *qs]).cumsum(0).to(torch.int32)
    dev = torch.device("cuda")
    plan = StepPlan.build(qsl.to(dev), torch.tensor(seqs, dtype=torch.int32, device=dev),
                          bt.to(dev), (1, max(s + n for s, n in prefixes)), min_hot_len=1)
    return plan, nxt


CASES = {
    "one-team-decode": ([(1, 4096)], [(0, 64 + i, 1) for i in range(64)]),
    "two-teams-mixed": ([(1, 1000), (1001, 3000)],
                        [(i % 2, 30 + 7 * i, 1 if i % 3 else 40) for i in range(24)]
                        + [(None, 100, 1), (None, 50, 50)]),
    "prefill-chunk": ([(1, 2048)], [(0, 512, 512) for _ in range(4)]),
}


@pytest.mark.parametrize("heads", [(32, 8), (40, 8)])  # GQA 4 (Llama-8B), 5 (Qwen-14B)
@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("backend", [Backend.CASCADE, Backend.PAGED])
def test_cuda_ops_match_reference(heads: tuple[int, int], case: str, backend: Backend) -> None:
    from granikv_engine.vllm_plugin.worker.kernels.cuda_ops import CudaOps

    h, hkv = heads
    prefixes, rows = CASES[case]
    plan, slots = make_step(prefixes, rows, seed=hash((case, h)) % 1000)
    kp = plan.lower([backend] * len(plan.groups))
    torch.manual_seed(0)
    k = torch.randn(slots, hkv, 128, dtype=torch.bfloat16, device="cuda")
    v = torch.randn_like(k)
    q = torch.randn(int(plan.query_start_loc[-1]), h, 128, dtype=torch.bfloat16, device="cuda")
    ref32 = torch.empty(q.shape, dtype=torch.float32, device="cuda")
    TorchOps().forward(q.float(), k.float(), v.float(), kp, 128 ** -0.5, ref32)
    out = torch.full_like(q, float("nan"))
    CudaOps().forward(q, k, v, kp, 128 ** -0.5, out)
    torch.cuda.synchronize()
    assert not out.isnan().any()
    err = rel(out, ref32)
    print(f"{case} heads={heads} {backend.value}: rel err {err:.2e}")
    assert err < BF16_TOL


def test_write_kv_matches_reference() -> None:
    from granikv_engine.vllm_plugin.worker.kernels.cuda_ops import CudaOps

    kv = torch.randn(300, 1, 8, 256, dtype=torch.bfloat16, device="cuda")
    ref = kv.clone()
    key = torch.randn(20, 8, 128, dtype=torch.bfloat16, device="cuda")
    val = torch.randn_like(key)
    slots = torch.randperm(299, device="cuda")[:20] + 1
    slots[3] = -1  # padding token: never written
    for ops, cache in ((CudaOps(), kv), (TorchOps(), ref)):
        ops.write_kv(key, val, cache[..., :128].flatten(0, 1), cache[..., 128:].flatten(0, 1),
                     slots)
    torch.cuda.synchronize()
    assert torch.equal(kv, ref)


def test_triton_merge_compiled() -> None:
    from granikv_engine.attention.reference import merge_attn_states
    from granikv_engine.attention.triton_merge import merge_indexed_

    t, h, d, qc = 300, 32, 128, 200
    out = torch.randn(t, h, d, device="cuda", dtype=torch.bfloat16)
    lse_s = torch.randn(h, t, device="cuda") * 3
    o_hot = torch.randn(qc, h, d, device="cuda", dtype=torch.bfloat16)
    lse_h = torch.randn(h, qc, device="cuda") * 3
    idx = torch.randperm(t, device="cuda")[:qc]
    ref = out.float().clone()
    ref[idx], _ = merge_attn_states(out[idx].float(), lse_s[:, idx], o_hot.float(), lse_h)
    merge_indexed_(out, lse_s, o_hot, lse_h, idx)
    assert rel(out, ref) < BF16_TOL


def test_the_merge_warm_up_covers_the_steps_that_follow() -> None:
    """What the metadata builder compiles at start-up (CudaOps.warm_up_merge) is the
    variant every later merge runs, whatever the step's token and group counts and
    wherever its index and LSE views start: no Triton compilation while serving."""
    from granikv_engine.attention.triton_merge import _merge_indexed, merge_indexed_
    from granikv_engine.vllm_plugin.worker.kernels.cuda_ops import CudaOps

    def variants() -> int:
        return sum(len(c[0]) for c in _merge_indexed.device_caches.values())

    h, d = 32, 128
    CudaOps().warm_up_merge(h, d, torch.bfloat16, torch.device("cuda"))
    warmed = variants()
    for t, qc, at in ((1, 1, 0), (7, 3, 1), (300, 200, 5), (4096, 1000, 3)):
        out = torch.randn(t, h, d, device="cuda", dtype=torch.bfloat16)
        lse_s = torch.randn(at + h * t, device="cuda")[at:].view(h, t)  # at any offset
        o_hot = torch.randn(qc, h, d, device="cuda", dtype=torch.bfloat16)
        lse_h = torch.randn(at + h * qc, device="cuda")[at:].view(h, qc)
        idx = torch.arange(at + qc, device="cuda", dtype=torch.int32)[at:] % t
        merge_indexed_(out, lse_s, o_hot, lse_h, idx)
    torch.cuda.synchronize()
    assert warmed >= 1 and variants() == warmed


def test_paged_plan_replays_in_a_full_cuda_graph() -> None:
    """What a FULL-graph decode step does: the paged pass is captured once over
    persistent buffers (lengths, block table, FA3's ahead-of-time schedule, as the
    builder keeps them), then replayed after each step rewrote those buffers with other
    lengths and other slots. Every replay must match the reference."""
    from granikv_engine.step_plan import KernelPlan
    from granikv_engine.vllm_plugin.worker.kernels.cuda_ops import CudaOps

    ops, dev, bf16 = CudaOps(), torch.device("cuda"), torch.bfloat16
    b, h, hkv, d, width, slots = 16, 32, 8, 128, 4096, 80_000
    k, v, qsl, seq, bt, sched, q, out = graph_world(b, width, slots, seed=1)

    def step(lens: list[int], seed: int) -> KernelPlan:
        g = torch.Generator().manual_seed(seed)
        seq.copy_(torch.tensor(lens, dtype=torch.int32))
        bt.zero_()
        for i, n in enumerate(lens):
            bt[i, :n] = (torch.randperm(slots - 1, generator=g)[:n] + 1).to(dev, torch.int32)
        q.copy_(torch.randn(b, h, d, generator=g).to(dev, bf16))
        meta = ops.schedule_paged(qsl, seq, 1, width, h, hkv, d, bf16, 32)
        sched[:meta.shape[0]] = meta
        sched[meta.shape[0]:] = 0
        return KernelPlan(qsl, seq, torch.zeros_like(seq), bt, 1, width, (),
                          torch.zeros(0, dtype=torch.int32, device=dev), (), None,
                          sched[:meta.shape[0]], 32)

    plan = step([1 + i for i in range(b)], seed=0)  # capture-time lengths: tiny
    graph = capture_graph(lambda: ops.forward(q, k, v, plan, d ** -0.5, out))
    for seed, lens in ((1, [4000 - 97 * i for i in range(b)]), (2, [1024] * b),
                       (3, [3 + 251 * i for i in range(b)])):
        step(lens, seed)
        out.fill_(float("nan"))
        graph.replay()
        ref32 = torch.empty(q.shape, dtype=torch.float32, device=dev)
        ref_plan = KernelPlan(qsl, seq, torch.zeros_like(seq), bt, 1, max(lens), (),
                              torch.zeros(0, dtype=torch.int32, device=dev), ())
        TorchOps().forward(q.float(), k.float(), v.float(), ref_plan, d ** -0.5, ref32)
        torch.cuda.synchronize()
        assert not out.isnan().any(), seed
        err = rel(out, ref32)
        print(f"graph replay {seed}: max len {max(lens)}, rel err {err:.2e}")
        assert err < BF16_TOL


def test_cascade_plan_replays_in_a_full_cuda_graph() -> None:
    """The graph form of a decode step (graph_plan.py), as a FULL graph of 64 rows runs
    it: captured once from a step with no HOT row at all (as at engine start), then
    replayed after steps with other teams, group counts, lengths and padding were
    lowered into the same buffers, each with FA3's ahead-of-time schedules for both
    passes. Every replay must match each row's full attention; the runner's own
    tensors (query starts, lengths, block table) are rewritten in place, as it does."""
    from dataclasses import replace

    import numpy as np

    from granikv_engine.attention.reference import full_attention
    from granikv_engine.graph_plan import GraphBuffers, GraphLimits
    from granikv_engine.step_plan import KernelPlan
    from granikv_engine.vllm_plugin.worker.kernels.cuda_ops import CudaOps

    ops, dev, bf16 = CudaOps(), torch.device("cuda"), torch.bfloat16
    n, h, hkv, d, width, slots, splits = 64, 32, 8, 128, 20_000, 120_000, 32
    arena = (1, 40_001)
    k, v, qsl, seq, bt, psched, q, out = graph_world(n, width, slots, seed=2)
    bufs = GraphBuffers(GraphLimits(rows=n, width=width, groups=4,
                                    hot_len=arena[1] - arena[0]), dev)
    dsched: list[torch.Tensor] = []

    def step(teams: list[tuple[int, int]], members: int, plain: int, seed: int
             ) -> tuple[KernelPlan, list[list[int]]]:
        rng = np.random.default_rng(seed)
        cold = iter(rng.permutation(np.arange(arena[1], slots)).tolist())
        rows = []
        for i in range(members + plain):
            hot = (list(range(teams[i % len(teams)][0], sum(teams[i % len(teams)])))
                   if i < members else [])
            rows.append(hot + [next(cold) for _ in range(int(rng.integers(1, 600)))])
        order = rng.permutation(len(rows))
        rows = [rows[i] for i in order]
        host_bt = torch.zeros(n, width, dtype=torch.int32)
        for i, r in enumerate(rows):
            host_bt[i, :len(r)] = torch.tensor(r, dtype=torch.int32)
        host_seq = torch.tensor([len(r) for r in rows] + [0] * (n - len(rows)),
                                dtype=torch.int32)
        host_qsl = torch.tensor(list(range(len(rows) + 1)) + [len(rows)] * (n - len(rows)),
                                dtype=torch.int32)
        qsl.copy_(host_qsl)
        seq.copy_(host_seq)
        bt.copy_(host_bt)
        q.copy_(torch.randn(n, h, d, generator=torch.Generator().manual_seed(seed)).to(
            dev, bf16))
        plan = StepPlan.build(qsl, seq, bt, arena, min_hot_len=16,
                              host=(host_qsl, host_seq, host_bt))
        kp = bufs.lower(plan, [Backend.CASCADE] * len(plan.groups))
        meta = ops.schedule_paged(kp.query_start_loc, kp.kv_seq_lens, 1, width, h, hkv, d,
                                  bf16, splits)
        psched[:meta.shape[0]] = meta
        psched[meta.shape[0]:] = 0
        c = kp.cascade_dev
        assert c is not None
        dm = ops.schedule_dense(c.cu_q, c.seqused_k, c.max_q, c.max_k, h, hkv, d, bf16,
                                splits)
        if not dsched:
            dsched.append(torch.zeros_like(dm))
        dsched[0].copy_(dm)
        return replace(kp, scheduler_metadata=psched[:meta.shape[0]], num_splits=splits,
                       cascade_dev=replace(c, scheduler_metadata=dsched[0],
                                           num_splits=splits)), rows

    plan, _ = step([(1, 16)], 0, 40, seed=0)  # capture: plain rows, no HOT run
    graph = capture_graph(lambda: ops.forward(q, k, v, plan, d ** -0.5, out))
    cases = ((1, [(1, 16_000), (20_001, 3000)], 50, 6),  # two teams, plain rows, padding
             (2, [(1, 9000), (9001, 700), (12_001, 5000), (30_001, 64)], 64, 0),  # four
             (3, [(1, 16)], 0, 50),  # no HOT row: the dense pass gets empty groups only
             (4, [(5001, 12_000)], 64, 0))  # one team, every row
    for seed, teams, members, plain in cases:
        _, rows = step(teams, members, plain, seed)
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        got = out[:len(rows)].float()
        assert not got.isnan().any(), seed
        ref = torch.stack([full_attention(q[i:i + 1].float(), k[r].float(), v[r].float(),
                                          d ** -0.5)[0][0] for i, r in enumerate(rows)])
        err = rel(got, ref)
        print(f"cascade graph replay {seed}: {len(teams)} teams, {len(rows)} rows, "
              f"rel err {err:.2e}")
        assert err < BF16_TOL
