"""Front-end engine statistics of one AsyncLLM: vLLM's own metrics, and the few numbers
the replica reports.

vLLM hands every engine iteration's ``SchedulerStats`` / ``IterationStats`` to its stat
loggers in the front-end process (``stat_loggers``):
- vLLM's ``RayPrometheusStatLogger`` (as Ray Serve LLM uses it): all of vLLM's metrics
  (TTFT, inter-token latency, end-to-end latency, prefix-cache queries and hits, KV cache
  usage, queue depth, ...) through ``ray.util.metrics``, exported by Ray's metrics agent
  on every node with a ``ReplicaId`` tag, next to Serve's own metrics;
- ``ThroughputLogger``: queue depth and token throughput, for the replica's report
  (/v1/granikv/stats). GraniKV's own counters come from the engine core's ``stats``.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

from vllm.v1.metrics.loggers import StatLoggerBase


def stat_loggers(throughput: ThroughputLogger) -> list[Any]:
    """vLLM stat logger factories of a replica's AsyncLLM (in a Ray worker)."""
    from vllm.v1.metrics.ray_wrappers import RayPrometheusStatLogger  # imports Ray

    return [lambda _cfg, _idx: throughput, RayPrometheusStatLogger]


class ThroughputLogger(StatLoggerBase):
    """Latest queue depth, token totals, and generation tokens/s over ``window_s``."""

    def __init__(self, vllm_config: Any = None, engine_index: int = 0,
                 window_s: float = 10.0) -> None:
        self.window_s = window_s
        self.running = 0
        self.waiting = 0
        self.kv_cache_usage = 0.0
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.finished_requests = 0
        self._samples: deque[tuple[float, int]] = deque()  # (time, generation_tokens)

    def record(self, scheduler_stats: Any, iteration_stats: Any, mm_cache_stats: Any = None,
               engine_idx: int = 0) -> None:
        if scheduler_stats is not None:
            self.running = scheduler_stats.num_running_reqs
            self.waiting = scheduler_stats.num_waiting_reqs
            self.kv_cache_usage = scheduler_stats.kv_cache_usage
        if iteration_stats is not None:
            self.prompt_tokens += iteration_stats.num_prompt_tokens
            self.generation_tokens += iteration_stats.num_generation_tokens
            self.finished_requests += len(iteration_stats.finished_requests)
            self._samples.append((time.monotonic(), self.generation_tokens))

    def log_engine_initialized(self) -> None:
        pass

    def tokens_per_s(self) -> float:
        now = time.monotonic()
        while self._samples and now - self._samples[0][0] > self.window_s:
            self._samples.popleft()
        if not self._samples:
            return 0.0
        t0, n0 = self._samples[0]
        # Tokens since the oldest sample in the window, over the window (or less at start).
        return (self.generation_tokens - n0) / max(now - t0, 1e-3)

    def snapshot(self) -> dict[str, Any]:
        return {"running": self.running, "waiting": self.waiting,
                "kv_cache_usage": self.kv_cache_usage, "prompt_tokens": self.prompt_tokens,
                "generation_tokens": self.generation_tokens,
                "finished_requests": self.finished_requests,
                "generation_tokens_per_s": self.tokens_per_s()}
