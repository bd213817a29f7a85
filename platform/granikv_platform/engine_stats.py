"""Front-end engine statistics of one AsyncLLM: vLLM's own metrics, and the few numbers
the replica reports.

vLLM hands every engine iteration's ``SchedulerStats`` / ``IterationStats`` to its stat
loggers in the front-end process (``stat_loggers``):
- vLLM's ``RayPrometheusStatLogger`` (as Ray Serve LLM uses it): all of vLLM's metrics
  (TTFT, inter-token latency, end-to-end latency, prefix-cache queries and hits, KV cache
  usage, queue depth, ...) through ``ray.util.metrics``, exported by Ray's metrics agent
  on every node with a ``ReplicaId`` tag, next to Serve's own metrics;
- ``ThroughputLogger``: queue depth, KV cache usage and token totals, for the replica's
  report (/v1/granikv/stats, and the app's /metrics, where they are also rendered under
  vLLM's own names). GraniKV's own counters come from the engine core's ``stats``.

``TeamUsage`` counts a replica's requests and tokens per team, from the answers (a
chat's or completion's ``usage``, a response's, streamed in ``response.completed``).
"""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import Mapping
from typing import Any

from vllm.v1.metrics.loggers import StatLoggerBase


def stat_loggers(throughput: ThroughputLogger) -> list[Any]:
    """vLLM stat logger factories of an AsyncLLM: in a Serve replica, also vLLM's
    ``RayPrometheusStatLogger``. Outside one (an engine host started by a script or a
    test in a process connected to Ray) it is left out: its samples would reach the
    node's metrics agent with an empty ``ReplicaId``, beside the replicas' own."""
    from ray import serve
    from ray.serve.exceptions import RayServeException
    from vllm.v1.metrics.ray_wrappers import RayPrometheusStatLogger

    loggers: list[Any] = [lambda _cfg, _idx: throughput]
    try:
        serve.get_replica_context()
    except RayServeException:
        return loggers
    return [*loggers, RayPrometheusStatLogger]


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


class TeamUsage:
    """Requests and tokens per team on one replica. Tokens come from the answers' own
    ``usage``: every non-streamed answer has it, a chat's stream only when the client
    asked for it (``stream_options.include_usage``), a response's stream always."""

    def __init__(self) -> None:
        self.teams: dict[str, dict[str, int]] = {}

    def request(self, team: str) -> None:
        self._of(team)["requests"] += 1

    def answer(self, team: str, body: Any) -> None:
        """A whole JSON answer (a chat, completion or response)."""
        if isinstance(body, Mapping):
            self._usage(team, body.get("usage"))

    def chunks(self, team: str, text: str) -> None:
        """SSE text of a stream: only a chunk that carries usage is parsed."""
        if '"usage":{' not in text and '"usage": {' not in text:
            return
        for line in text.split("\n"):
            if line.startswith("data: {") and '"usage"' in line:
                try:
                    event = json.loads(line[6:])
                except ValueError:
                    continue
                if not isinstance(event, dict):
                    continue
                inner = event.get("response")  # a response's events: {"response": {...}}
                self._usage(team, inner.get("usage") if isinstance(inner, dict)
                            else event.get("usage"))

    def snapshot(self) -> dict[str, dict[str, int]]:
        return {team: dict(c) for team, c in self.teams.items()}

    def _usage(self, team: str, usage: Any) -> None:
        if not isinstance(usage, Mapping):
            return
        c = self._of(team)  # chat's names, or the Responses API's
        c["prompt_tokens"] += int(usage.get("prompt_tokens") or usage.get("input_tokens") or 0)
        c["generation_tokens"] += int(usage.get("completion_tokens")
                                      or usage.get("output_tokens") or 0)

    def _of(self, team: str) -> dict[str, int]:
        return self.teams.setdefault(team, dict.fromkeys(TEAM_COUNTERS, 0))


TEAM_COUNTERS: tuple[str, ...] = ("requests", "prompt_tokens", "generation_tokens")
