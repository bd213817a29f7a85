"""Prometheus text for /metrics, from the replicas' latest reports (``LLMReplica.stats``).

Every replica reports every ``sync_period_s`` to the registry hub; the replica that
serves /metrics renders what the live ones said, one label set per replica. Each family
has one meaning, so that summing it over its labels means something: capacity and use
are separate families, and a label is never empty. Per-team families have a ``team``
label whose values are the configured teams (any other caller is counted as ``_other``),
so their number of series is bounded by the config. The vLLM families an operator of
``vllm serve`` reads first (``vllm:kv_cache_usage_perc``, ``vllm:num_requests_running``
/ ``_waiting``, ``vllm:prompt_tokens_total``, ``vllm:generation_tokens_total``,
``vllm:request_success_total``) are rendered here too, per replica, from the replica's
report; all of vLLM's metrics (latency histograms included) are also exported by Ray's
metrics agent (engine_stats.py). Pure: no Ray, no vLLM. The engine's part of a report
has the shape ``granikv_engine.stats.EngineStats`` declares.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from granikv_engine.stats import (
    ColdStats,
    DispatchSnapshot,
    EngineStats,
    HitStats,
    HotStats,
    parse_size_key,
)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
OTHER_TEAM = "_other"  # the team label of callers that are no configured team

# what a report without the engine's part (a replica still starting) counts as
_NO_HOT: HotStats = {"capacity": 0, "used": 0, "pinned": 0, "referenced": 0, "free": 0,
                     "largest_free_run": 0, "fragmentation": 0.0, "entries": 0}
_NO_COLD: ColdStats = {"capacity": 0, "free": 0, "used": 0, "usage": 0.0}
_NO_HITS: HitStats = {"hits": 0, "hit_tokens": 0, "cold_fallbacks": 0, "cold_replaced": 0,
                      "implicit_hits": 0}
_NO_DISPATCH: DispatchSnapshot = {"steps": 0, "groups": {}, "rows": {}, "regimes": {},
                                  "sources": {}, "plain_rows": 0, "graph_steps": 0,
                                  "graph_cascade_steps": 0, "group_sizes": {},
                                  "step_kinds": {}}


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
    g: EngineStats = r.get("granikv", {})  # the engine's stats call, as it declares it
    fe: Mapping[str, Any] = r.get("frontend", {})
    hot = g.get("hot") or _NO_HOT
    cold = g.get("cold") or _NO_COLD
    hits = g.get("hits") or _NO_HITS
    events = g.get("events", {})
    f.add("gauge", "granikv_replica_up", "1 per live LLM replica.", labels, 1)
    for kind, doc, slots in (("capacity", "HOT arena size", hot["capacity"]),
                             ("used", "HOT slots in use", hot["used"]),
                             ("pinned", "HOT slots of pinned prefixes", hot["pinned"]),
                             ("referenced", "HOT slots running requests read",
                              hot["referenced"]),
                             ("free", "free HOT slots", hot["free"])):
        f.add("gauge", f"granikv_hot_{kind}_slots", f"{doc} (tokens).", labels, slots)
    f.add("gauge", "granikv_hot_fragmentation", "1 - largest free HOT run / free HOT slots.",
          labels, hot["fragmentation"])
    for kind, doc, slots in (("capacity", "COLD pool size", cold["capacity"]),
                             ("used", "COLD slots in use", cold["used"]),
                             ("free", "free COLD slots", cold["free"])):
        f.add("gauge", f"granikv_cold_{kind}_slots", f"{doc} (tokens).", labels, slots)
    f.add("gauge", "granikv_cold_usage_ratio", "COLD pool usage.", labels, cold["usage"])
    for state, n in g.get("prefixes", {}).items():
        f.add("gauge", "granikv_prefixes", "Registered prefixes by state.", labels, n,
              {"state": state})
    f.add("gauge", "granikv_pinned_prefixes", "Pinned prefixes.", labels,
          r.get("pinned_prefixes", 0))
    f.add("counter", "granikv_prefix_hits", "Requests served from a HOT prefix.", labels,
          hits["hits"])
    f.add("counter", "granikv_prefix_hit_tokens", "Prompt tokens read from HOT.", labels,
          hits["hit_tokens"])
    replaced = hits.get("cold_replaced", 0)
    for reason, n in (("cold_fallback", hits["cold_fallbacks"] - replaced),
                      ("replaced", replaced),
                      ("bind_error", events.get("bind_errors", 0)),
                      ("prompt_logprobs", events.get("prefix_reads_skipped", 0))):
        f.add("counter", "granikv_prefix_misses", "Bound requests served without HOT.",
              labels, n, {"reason": reason})
    for event in ("bound_requests", "registrations", "fills_done", "fills_aborted"):
        f.add("counter", f"granikv_{event}", f"Engine events: {event}.", labels,
              events.get(event, 0))
    f.add("counter", "granikv_evictions", "HOT prefixes evicted.", labels, g.get("evictions", 0))
    f.add("counter", "granikv_prefix_replacements",
          "Prefix ids registered again with other tokens.", labels, g.get("replacements", 0))
    imp: Mapping[str, Any] = g.get("implicit") or {}
    for kind, doc in (("promotions", "Shared prompt heads promoted to HOT by the engine."),
                      ("evictions", "Implicit HOT prefixes evicted."),
                      ("adoptions", "Registrations that took over an implicit prefix."),
                      ("hits", "Requests served from an implicit HOT prefix.")):
        f.add("counter", f"granikv_implicit_{kind}", doc, labels, float(imp.get(kind, 0)))
    for kind, doc in (("used", "HOT slots of implicit prefixes"),
                      ("budget", "HOT slots implicit prefixes may hold")):
        f.add("gauge", f"granikv_implicit_{kind}_slots", f"{doc} (tokens).", labels,
              float(imp.get(kind, 0)))
    _dispatch(f, labels, g.get("dispatch") or _NO_DISPATCH)
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
    _vllm(f, labels, fe)


def _vllm(f: _Families, labels: Mapping[str, str], fe: Mapping[str, Any]) -> None:
    """vLLM's own names and meanings (``vllm.v1.metrics.loggers.PrometheusStatLogger``),
    with its ``model_name`` label and the replica's."""
    vl = {"model_name": labels["model"], "replica": labels["replica"]}
    f.add("gauge", "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
          vl, fe.get("kv_cache_usage", 0.0))
    f.add("gauge", "vllm:num_requests_running", "Number of requests in model execution "
          "batches.", vl, fe.get("running", 0))
    f.add("gauge", "vllm:num_requests_waiting", "Number of requests waiting to be "
          "processed.", vl, fe.get("waiting", 0))
    f.add("counter", "vllm:prompt_tokens", "Number of prefill tokens processed.", vl,
          fe.get("prompt_tokens", 0))
    f.add("counter", "vllm:generation_tokens", "Number of generation tokens processed.", vl,
          fe.get("generation_tokens", 0))
    f.add("counter", "vllm:request_success", "Count of successfully processed requests.",
          vl, fe.get("finished_requests", 0))


def _teams(f: _Families, labels: Mapping[str, str], r: Mapping[str, Any],
           teams: Collection[str]) -> None:
    """Per team (a configured one, else ``_other``): requests and tokens this replica
    served, and the HOT hits of the team's prefixes registered on it."""
    def team_of(name: object) -> str:
        return name if isinstance(name, str) and name in teams else OTHER_TEAM

    sums: dict[str, dict[str, float]] = {}
    for name, c in (r.get("teams") or {}).items():
        row = sums.setdefault(team_of(name), {})
        for k, v in c.items():
            row[k] = row.get(k, 0) + v
    for p in (r.get("prefix_hits") or {}).values():
        row = sums.setdefault(team_of(p.get("team")), {})
        row["hot_hits"] = row.get("hot_hits", 0) + p.get("hits", 0)
    for team, row in sorted(sums.items()):
        extra = {"team": team}
        f.add("counter", "granikv_team_requests", "Chat and completion requests by team.",
              labels, row.get("requests", 0), extra)
        f.add("counter", "granikv_team_prompt_tokens", "Prompt tokens by team (answers "
              "that report usage: all but streams without include_usage).", labels,
              row.get("prompt_tokens", 0), extra)
        f.add("counter", "granikv_team_generation_tokens", "Output tokens by team (answers "
              "that report usage).", labels, row.get("generation_tokens", 0), extra)
        f.add("gauge", "granikv_team_prefix_hits", "Requests served from the HOT prefixes "
              "of the team registered on the replica (a deleted prefix's hits leave it).",
              labels, row.get("hot_hits", 0), extra)


def _dispatch(f: _Families, labels: Mapping[str, str], d: DispatchSnapshot) -> None:
    f.add("counter", "granikv_dispatch_steps", "Steps the dispatcher planned.", labels,
          d["steps"])
    for backend, n in d["groups"].items():
        f.add("counter", "granikv_dispatch_groups", "HOT groups by chosen backend.", labels, n,
              {"backend": backend})
    for backend, n in d["rows"].items():
        f.add("counter", "granikv_dispatch_rows", "Rows by chosen backend.", labels, n,
              {"backend": backend})
    for regime, n in d["regimes"].items():
        f.add("counter", "granikv_dispatch_regimes", "HOT groups by regime.", labels, n,
              {"regime": regime})
    for source, n in d["sources"].items():
        f.add("counter", "granikv_dispatch_sources", "Choices by source of the decision.",
              labels, n, {"source": source})
    for key, n in d["group_sizes"].items():
        size, backend = parse_size_key(key)
        f.add("counter", "granikv_dispatch_group_sizes",
              "HOT groups by size (rows, rounded up to a power of two) and chosen backend.",
              labels, n, {"size": str(size), "backend": backend})
    steps, graphs, cascade = d["steps"], d["graph_steps"], d["graph_cascade_steps"]
    for mode, n in (("full_cascade", cascade), ("full_paged", graphs - cascade),
                    ("piecewise", steps - graphs)):
        f.add("counter", "granikv_dispatch_graph_steps",
              "Steps by CUDA-graph mode: FULL graphs with the cascade, FULL graphs with "
              "the paged kernel only, PIECEWISE (attention eager; all steps on a CPU).",
              labels, n, {"mode": mode})


class _Collector:
    def __init__(self, reports: Mapping[str, Mapping[str, Any]],
                 teams: Collection[str]) -> None:
        self.reports = reports
        self.teams = teams

    def collect(self) -> Iterator[Metric]:
        f = _Families()
        f.add("gauge", "granikv_replicas", "Live LLM replicas.", {}, len(self.reports))
        for rid, r in sorted(self.reports.items()):
            labels = {"replica": rid, "model": str(r.get("model", ""))}
            _replica(f, labels, r)
            _teams(f, labels, r, self.teams)
        yield from f.out.values()


def render(reports: Mapping[str, Mapping[str, Any]], teams: Collection[str] = ()) -> bytes:
    """``teams``: the configured teams, the values the ``team`` label may take."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(reports, frozenset(teams)))  # type: ignore[arg-type]
    return generate_latest(registry)
