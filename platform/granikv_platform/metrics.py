"""Prometheus text for /metrics, from the replicas' latest reports (``LLMReplica.stats``).

Every replica reports every ``sync_period_s`` to the registry hub; the ingress renders
what the live ones said, one label set per replica. Each family has one meaning, so that
summing it over its labels means something: capacity and use are separate families, and
a label is never empty. vLLM's own metrics (latencies, prefix cache, KV usage) are
exported by Ray's metrics agent (engine_stats.py). Pure: no Ray, no vLLM.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class _Families:
    def __init__(self) -> None:
        self.out: dict[str, Metric] = {}

    def add(self, kind: str, name: str, doc: str, labels: Mapping[str, str],
            value: float, extra: Mapping[str, str] | None = None) -> None:
        all_labels = {**labels, **(extra or {})}
        names = sorted(all_labels)
        if name not in self.out:
            cls = CounterMetricFamily if kind == "counter" else GaugeMetricFamily
            self.out[name] = cls(name, doc, labels=names)
        self.out[name].add_metric([all_labels[k] for k in names],  # type: ignore[attr-defined]
                                  float(value))


def _replica(f: _Families, labels: Mapping[str, str], r: Mapping[str, Any]) -> None:
    g: Mapping[str, Any] = r.get("granikv", {})
    fe: Mapping[str, Any] = r.get("frontend", {})
    hot, cold = g.get("hot", {}), g.get("cold", {})
    hits, events = g.get("hits", {}), g.get("events", {})
    f.add("gauge", "granikv_replica_up", "1 per live LLM replica.", labels, 1)
    for kind, doc in (("capacity", "HOT arena size"), ("used", "HOT slots in use"),
                      ("pinned", "HOT slots of pinned prefixes"),
                      ("referenced", "HOT slots running requests read"),
                      ("free", "free HOT slots")):
        f.add("gauge", f"granikv_hot_{kind}_slots", f"{doc} (tokens).", labels,
              hot.get(kind, 0))
    f.add("gauge", "granikv_hot_fragmentation", "1 - largest free HOT run / free HOT slots.",
          labels, hot.get("fragmentation", 0.0))
    for kind, doc in (("capacity", "COLD pool size"), ("used", "COLD slots in use"),
                      ("free", "free COLD slots")):
        f.add("gauge", f"granikv_cold_{kind}_slots", f"{doc} (tokens).", labels,
              cold.get(kind, 0))
    f.add("gauge", "granikv_cold_usage_ratio", "COLD pool usage.", labels, cold.get("usage", 0))
    for state, n in g.get("prefixes", {}).items():
        f.add("gauge", "granikv_prefixes", "Registered prefixes by state.", labels, n,
              {"state": state})
    f.add("gauge", "granikv_pinned_prefixes", "Pinned prefixes.", labels,
          r.get("pinned_prefixes", 0))
    f.add("counter", "granikv_prefix_hits", "Requests served from a HOT prefix.", labels,
          hits.get("hits", 0))
    f.add("counter", "granikv_prefix_hit_tokens", "Prompt tokens read from HOT.", labels,
          hits.get("hit_tokens", 0))
    for reason, n in (("cold_fallback", hits.get("cold_fallbacks", 0)),
                      ("bind_error", events.get("bind_errors", 0)),
                      ("prompt_logprobs", events.get("prefix_reads_skipped", 0))):
        f.add("counter", "granikv_prefix_misses", "Bound requests served without HOT.",
              labels, n, {"reason": reason})
    for event in ("bound_requests", "registrations", "fills_done", "fills_aborted"):
        f.add("counter", f"granikv_{event}", f"Engine events: {event}.", labels,
              events.get(event, 0))
    f.add("counter", "granikv_evictions", "HOT prefixes evicted.", labels, g.get("evictions", 0))
    _dispatch(f, labels, g.get("dispatch", {}))
    f.add("gauge", "granikv_generation_tokens_per_second", "Output tokens/s (10 s window).",
          labels, fe.get("generation_tokens_per_s", 0.0))
    f.add("counter", "granikv_generation_tokens", "Output tokens.", labels,
          fe.get("generation_tokens", 0))
    f.add("counter", "granikv_prompt_tokens", "Prompt tokens.", labels, fe.get("prompt_tokens", 0))
    for queue in ("running", "waiting"):
        f.add("gauge", "granikv_queue_depth", "Engine requests by queue.", labels,
              fe.get(queue, 0), {"queue": queue})
    f.add("gauge", "granikv_inflight_requests", "Requests inside the replica.", labels,
          r.get("inflight", 0))
    f.add("gauge", "granikv_kv_cache_usage_ratio", "vLLM's KV cache usage.", labels,
          fe.get("kv_cache_usage", 0.0))


def _dispatch(f: _Families, labels: Mapping[str, str], d: Mapping[str, Any]) -> None:
    f.add("counter", "granikv_dispatch_steps", "Steps the dispatcher planned.", labels,
          d.get("steps", 0))
    for backend, n in d.get("groups", {}).items():
        f.add("counter", "granikv_dispatch_groups", "HOT groups by chosen backend.", labels, n,
              {"backend": backend})
    for backend, n in d.get("rows", {}).items():
        f.add("counter", "granikv_dispatch_rows", "Rows by chosen backend.", labels, n,
              {"backend": backend})
    for regime, n in d.get("regimes", {}).items():
        f.add("counter", "granikv_dispatch_regimes", "HOT groups by regime.", labels, n,
              {"regime": regime})
    for source, n in d.get("sources", {}).items():
        f.add("counter", "granikv_dispatch_sources", "Choices by source of the decision.",
              labels, n, {"source": source})
    steps, graphs, cascade = (d.get(k, 0) for k in ("steps", "graph_steps",
                                                     "graph_cascade_steps"))
    for mode, n in (("full_cascade", cascade), ("full_paged", graphs - cascade),
                    ("piecewise", steps - graphs)):
        f.add("counter", "granikv_dispatch_graph_steps",
              "Steps by CUDA-graph mode: FULL graphs with the cascade, FULL graphs with "
              "the paged kernel only, PIECEWISE (attention eager; all steps on a CPU).",
              labels, n, {"mode": mode})


class _Collector:
    def __init__(self, reports: Mapping[str, Mapping[str, Any]]) -> None:
        self.reports = reports

    def collect(self) -> Iterator[Metric]:
        f = _Families()
        f.add("gauge", "granikv_replicas", "Live LLM replicas.", {}, len(self.reports))
        for rid, r in sorted(self.reports.items()):
            _replica(f, {"replica": rid, "model": str(r.get("model", ""))}, r)
        yield from f.out.values()


def render(reports: Mapping[str, Mapping[str, Any]]) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(reports))  # type: ignore[arg-type]
    return generate_latest(registry)
