"""Start-up calibration: time both backends over a grid of shapes on this GPU.

Each grid point is a synthetic step built through the real ``StepPlan`` lowering: ``rows``
requests share one HOT prefix of ``hot_len`` tokens and own ``suffix`` COLD tokens, with
``q`` query tokens each (1: decode; more: prefill). Times are per layer, medians of CUDA
event timings. With tensor parallelism every rank must use the same table: rank 0's is
broadcast (``broadcast``), so dispatch decisions agree.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from granikv_engine.dispatcher import Backend, CalibrationPoint, CalibrationTable
from granikv_engine.step_plan import KernelPlan, StepPlan

ROWS = (1, 4, 16, 64, 256)
HOT = (512, 2048, 8192, 16384)
QUERIES = (1, 64)
SUFFIX = 64


def synthetic_step(rows: int, hot_len: int, q: int, suffix: int, device: torch.device
                   ) -> tuple[StepPlan, int]:
    """A step of ``rows`` rows on one prefix at slots [1, 1+hot_len); returns the plan and
    the number of slots used."""
    own = max(suffix, q)
    base = 1 + hot_len
    hot = torch.arange(1, base, dtype=torch.int32)
    table = torch.empty(rows, hot_len + own, dtype=torch.int32)
    for i in range(rows):
        table[i, :hot_len] = hot
        table[i, hot_len:] = torch.arange(base + i * own, base + (i + 1) * own,
                                          dtype=torch.int32)
    seq = torch.full((rows,), hot_len + own, dtype=torch.int32)
    qsl = torch.arange(0, (rows + 1) * q, q, dtype=torch.int32)
    plan = StepPlan.build(qsl.to(device), seq.to(device), table.to(device),
                          (1, base), min_hot_len=1)
    return plan, base + rows * own


def time_graph_us(fn: Callable[[], None], reps: int = 20) -> float:
    """GPU time of ``fn`` without launch overhead: captured once in a CUDA graph, median
    over timed replays."""
    fn()
    return time_us(capture_graph(fn).replay, reps=reps, warmup=2)


def capture_graph(fn: Callable[[], None]) -> torch.cuda.CUDAGraph:
    """``fn`` once on a side stream (warm-up), then captured in a CUDA graph."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph


def time_us(fn: Callable[[], None], reps: int = 5, warmup: int = 2) -> float:
    """Eager time of ``fn`` (CPU launch overhead included), median of CUDA-event timings."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3)
    return statistics.median(times)


def measure(ops: Any, plan: StepPlan, slots: int, num_queries: int, num_heads: int,
            num_kv_heads: int, head_dim: int, dtype: torch.dtype, device: torch.device
            ) -> dict[str, float]:
    """GPU and eager times (us) of both backends on one synthetic step."""
    k = torch.randn(slots, num_kv_heads, head_dim, dtype=dtype, device=device)
    v = torch.randn_like(k)
    x = torch.randn(num_queries, num_heads, head_dim, dtype=dtype, device=device)
    out = torch.empty_like(x)
    scale = head_dim ** -0.5
    res: dict[str, float] = {}
    for be in (Backend.CASCADE, Backend.PAGED):
        kp: KernelPlan = plan.lower([be])

        def run(kp: KernelPlan = kp) -> None:
            ops.forward(x, k, v, kp, scale, out)

        res[be.value] = time_graph_us(run)  # GPU time: what a group adds to a step
        res[be.value + "_eager"] = time_us(run)  # with this process's launch overhead
    return res


def calibrate(ops: Any, num_heads: int, num_kv_heads: int, head_dim: int,
              dtype: torch.dtype, device: torch.device, rows: Sequence[int] = ROWS,
              hot: Sequence[int] = HOT, queries: Sequence[int] = QUERIES,
              budget_s: float = 25.0) -> CalibrationTable:
    t0 = time.perf_counter()
    pts: list[CalibrationPoint] = []
    overheads: list[float] = []
    for q in queries:
        for lp in hot:
            for r in rows:
                if time.perf_counter() - t0 > budget_s or r * q > 16384:
                    continue
                plan, slots = synthetic_step(r, lp, q, SUFFIX, device)
                t = measure(ops, plan, slots, r * q, num_heads, num_kv_heads, head_dim,
                            dtype, device)
                pts.append(CalibrationPoint(r, lp, q, t["cascade"], t["paged"]))
                overheads.append((t["cascade_eager"] - t["cascade"])
                                 - (t["paged_eager"] - t["paged"]))
    torch.cuda.synchronize()
    meta = {"gpu": torch.cuda.get_device_name(device), "heads": num_heads,
            "kv_heads": num_kv_heads, "head_dim": head_dim, "dtype": str(dtype),
            "suffix": SUFFIX, "seconds": round(time.perf_counter() - t0, 2),
            "timing": "cuda-graph replays (GPU time)",
            # the cascade's extra launches, paid once per step (median over the grid)
            "cascade_overhead_us": max(0.0, statistics.median(overheads)) if overheads else 0.0}
    return CalibrationTable(tuple(pts), meta)


def broadcast(table: CalibrationTable | None) -> CalibrationTable | None:
    """Rank 0's table on every tensor-parallel rank (no-op without TP)."""
    try:
        from vllm.distributed import get_tp_group

        group = get_tp_group()
    except (AssertionError, ImportError):
        return table
    if group.world_size <= 1:
        return table
    text = group.broadcast_object(table.to_json() if table else None, src=0)
    return CalibrationTable.from_json(text) if text else None
