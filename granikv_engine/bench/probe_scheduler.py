"""Stock vLLM schedulers with a measurement probe and nothing else changed.

They answer the same ``granikv_control("stats")`` utility call as GraniKV (peak KV
slots in use, engine-core time per step), so benchmarks and tests can put stock and
GraniKV figures side by side. Selected with ``scheduler_cls=...ProbeScheduler``.
"""

from __future__ import annotations

import time
from typing import Any

from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.scheduler import Scheduler

from granikv_engine.vllm_plugin.core.scheduler import StepStats


class _ProbeControl:
    def __init__(self, s: Any) -> None:
        self.s = s

    def handle(self, op: str, args: dict[str, Any]) -> dict[str, Any]:
        if op == "reset_peaks":
            self.s.step_stats = StepStats(bool(args.get("track", False)))
            return {"ok": True}
        if op != "stats":
            return {"error": {"status": 400, "type": "ValueError",
                              "message": "stock engine: only 'stats' and 'reset_peaks'"}}
        bp = self.s.kv_cache_manager.block_pool
        cap = bp.num_gpu_blocks - 1
        free = bp.get_num_free_blocks()
        snap = self.s.step_stats.snapshot()
        return {"cold": {"capacity": cap * self.s.block_size, "block_size": self.s.block_size,
                         "used": (cap - free) * self.s.block_size},
                "scheduler": {**snap, "peak_cold_used": snap["peak_cold_used"]
                              * self.s.block_size}}  # slots, like GraniKV's


class _ProbeMixin:
    def _probe_setup(self) -> None:
        self.step_stats = StepStats()
        self.control = _ProbeControl(self)

    def schedule(self, *args: Any, **kwargs: Any) -> Any:
        t = time.perf_counter()
        out = super().schedule(*args, **kwargs)  # type: ignore[misc]
        dt = time.perf_counter() - t
        bp = self.kv_cache_manager.block_pool  # type: ignore[attr-defined]
        used = bp.num_gpu_blocks - 1 - bp.get_num_free_blocks()
        bs = self.block_size  # type: ignore[attr-defined]
        over = 0
        if self.step_stats.track:
            tokens = sum(r.num_computed_tokens for r in self.running)  # type: ignore[attr-defined]
            over = used * bs - tokens
        self.step_stats.scheduled(dt, used, over)
        return out

    def update_from_output(self, *args: Any, **kwargs: Any) -> Any:
        t = time.perf_counter()
        out = super().update_from_output(*args, **kwargs)  # type: ignore[misc]
        self.step_stats.updated(time.perf_counter() - t)
        return out


class ProbeScheduler(_ProbeMixin, Scheduler):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._probe_setup()


class AsyncProbeScheduler(_ProbeMixin, AsyncScheduler):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._probe_setup()
