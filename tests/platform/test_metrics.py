"""/metrics rendering from replica reports (Prometheus text, parsed back)."""

from __future__ import annotations

from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from granikv_platform.metrics import render

REPORT: dict[str, Any] = {
    "model": "tiny", "inflight": 2, "pinned_prefixes": 3,
    "granikv": {
        "hot": {"capacity": 8192, "used": 600, "pinned": 465, "referenced": 0, "free": 7592,
                "largest_free_run": 7592, "fragmentation": 0.0, "entries": 2},
        "cold": {"capacity": 1000, "free": 900, "used": 100, "usage": 0.1},
        "prefixes": {"filling": 0, "ready": 2, "cold": 1},
        "hits": {"hits": 5, "hit_tokens": 2325, "cold_fallbacks": 1},
        "events": {"registrations": 2, "fills_done": 2, "fills_aborted": 0, "bind_errors": 0,
                   "bound_requests": 6, "prefix_reads_skipped": 3},
        "evictions": 0,
        "dispatch": {"steps": 7, "groups": {"paged": 5, "cascade": 2},
                     "rows": {"paged": 5, "cascade": 9}, "regimes": {"memory": 7},
                     "sources": {"roofline": 7}, "plain_rows": 0, "graph_steps": 5,
                     "graph_cascade_steps": 2, "group_sizes": {"8/cascade": 2, "1/paged": 5},
                     "step_kinds": {"decode/full": 5, "mixed/piecewise": 2}}},
    "frontend": {"running": 4, "waiting": 1, "kv_cache_usage": 0.25, "prompt_tokens": 900,
                 "generation_tokens": 160, "finished_requests": 9,
                 "generation_tokens_per_s": 12.5},
    "teams": {"red": {"requests": 5, "prompt_tokens": 700, "generation_tokens": 100},
              "blue": {"requests": 2, "prompt_tokens": 150, "generation_tokens": 40},
              "_anonymous": {"requests": 1, "prompt_tokens": 30, "generation_tokens": 10},
              "ghost": {"requests": 1, "prompt_tokens": 20, "generation_tokens": 10}},
    "prefix_hits": {"red-ctx": {"team": "red", "hits": 4, "pinned": True, "state": "ready"},
                    "red-2": {"team": "red", "hits": 1, "pinned": True, "state": "ready"},
                    "ghost-1": {"team": "ghost", "hits": 0, "pinned": False,
                                "state": "cold"}},
}


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_render_reports_every_family() -> None:
    got = samples(render({"r1": REPORT, "r2": REPORT}).decode())
    r1 = (("model", "tiny"), ("replica", "r1"))

    def at(name: str, **extra: str) -> float:
        return got[(name, tuple(sorted((*r1, *extra.items()))))]

    assert got[("granikv_replicas", ())] == 2
    assert at("granikv_hot_used_slots") == 600 and at("granikv_hot_capacity_slots") == 8192
    assert at("granikv_hot_pinned_slots") == 465 and at("granikv_hot_free_slots") == 7592
    assert at("granikv_cold_capacity_slots") == 1000 and at("granikv_cold_used_slots") == 100
    assert at("granikv_pinned_prefixes") == 3
    assert at("granikv_prefixes", state="ready") == 2
    assert at("granikv_prefix_hits_total") == 5
    assert at("granikv_prefix_misses_total", reason="cold_fallback") == 1
    assert at("granikv_prefix_misses_total", reason="prompt_logprobs") == 3
    assert at("granikv_dispatch_groups_total", backend="cascade") == 2
    assert at("granikv_dispatch_regimes_total", regime="memory") == 7
    assert at("granikv_dispatch_group_sizes_total", size="8", backend="cascade") == 2
    assert at("granikv_dispatch_group_sizes_total", size="1", backend="paged") == 5
    assert at("granikv_dispatch_graph_steps_total", mode="full_cascade") == 2
    assert at("granikv_dispatch_graph_steps_total", mode="full_paged") == 3
    assert at("granikv_dispatch_graph_steps_total", mode="piecewise") == 2
    assert at("granikv_generation_tokens_per_second") == 12.5
    assert at("granikv_queue_depth", queue="waiting") == 1
    assert ("granikv_prefix_hits_total", (("model", "tiny"), ("replica", "r2"))) in got
    assert all(v for _, labels in got for _, v in labels)  # no empty label values


def test_render_without_replicas() -> None:
    got = samples(render({}).decode())
    assert got == {("granikv_replicas", ()): 0.0}


def test_the_declared_hot_stats_are_the_pools() -> None:
    """``stats.HotStats`` declares what ``HotPool.stats()._asdict()`` sends: one list."""
    from granikv_engine.hot_pool import HotPoolStats
    from granikv_engine.stats import HotStats

    assert tuple(HotStats.__annotations__) == HotPoolStats._fields


def test_per_team_families_and_vllms_own_names() -> None:
    """Per team (bounded by the configured teams: any other caller is ``_other``), and
    the vLLM families a ``vllm serve`` operator reads first, per replica."""
    got = samples(render({"r1": REPORT, "r2": REPORT}, teams=["red", "blue", "gold"]).decode())
    r1 = (("model", "tiny"), ("replica", "r1"))

    def team(name: str, t: str) -> float:
        return got[(name, tuple(sorted((*r1, ("team", t)))))]

    assert team("granikv_team_requests_total", "red") == 5
    assert team("granikv_team_prompt_tokens_total", "blue") == 150
    assert team("granikv_team_generation_tokens_total", "red") == 100
    assert team("granikv_team_requests_total", "_other") == 2  # anonymous + an unknown team
    assert team("granikv_team_prompt_tokens_total", "_other") == 50
    assert team("granikv_team_prefix_hits", "red") == 5
    assert {dict(labels)["team"] for name, labels in got
            if name.startswith("granikv_team_")} == {"red", "blue", "_other"}
    v1 = (("model_name", "tiny"), ("replica", "r1"))
    assert got[("vllm:kv_cache_usage_perc", v1)] == 0.25
    assert got[("vllm:num_requests_running", v1)] == 4
    assert got[("vllm:num_requests_waiting", v1)] == 1
    assert got[("vllm:prompt_tokens_total", v1)] == 900
    assert got[("vllm:generation_tokens_total", v1)] == 160
    assert got[("vllm:request_success_total", v1)] == 9
    assert ("vllm:kv_cache_usage_perc", (("model_name", "tiny"), ("replica", "r2"))) in got


def test_team_usage_counts_answers_and_usage_chunks() -> None:
    from granikv_platform.engine_stats import TeamUsage

    u = TeamUsage()
    u.request("red")
    u.answer("red", {"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 4}})
    u.request("red")
    u.chunks("red", 'data: {"choices":[{"delta":{"content":"hi"}}]}\n\n')
    u.chunks("red", 'data: {"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3,'
                    '"total_tokens":10}}\n\ndata: [DONE]\n\n')
    assert u.snapshot() == {"red": {"requests": 2, "prompt_tokens": 19,
                                    "generation_tokens": 7}}
