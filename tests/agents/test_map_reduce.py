"""The 8-reviewer map-reduce team through REST (the run service, the Serve-handle
binding): it completes; its context was registered once and stayed pinned; every agent
request hit the team's HOT prefix, as the engine counts it."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.agents.helpers import delta, fresh_review, same_pin, settled, totals, wait_run
from tests.conftest import stats

pytestmark = [pytest.mark.ray, pytest.mark.vllm]
Client = Callable[[str | None], httpx.Client]


def metric_hits(c: httpx.Client) -> float:
    """``c``: a client with the operator key (/metrics shows every team's prefixes)."""
    r = c.get("/metrics")
    assert r.status_code == 200, r.text
    fams = {f.name: f for f in text_string_to_metric_families(r.text)}
    return sum(s.value for s in fams["granikv_prefix_hits"].samples)


def test_review_team_pins_its_context_once_and_every_turn_hits_it(
        client: Client, base_url: str) -> None:
    red = client("red")
    body = {"spec": fresh_review()}
    ops = client("@admin")
    assert red.get("/metrics").status_code == 403  # a team's key does not read /metrics
    before, metric_before = totals(stats(base_url)), metric_hits(ops)
    start = red.post("/teams/red/runs", json=body)
    assert start.status_code == 201, start.text
    run = start.json()
    assert run["status"] == "running" and run["links"]["events"].endswith("/events")
    view = wait_run(red, "red", run["run_id"])
    assert view["status"] == "succeeded", view["error"]

    reviewers = ["isolation", "capacity", "errors", "metrics", "restarts", "latency", "docs",
                 "tests"]
    assert [(t["agent"], t["kind"]) for t in view["turns"]] == [
        *((r, "work") for r in reviewers), ("synthesizer", "reduce")]
    ctx = view["context"]
    assert ctx["reused"] is False and ctx["state"] == "ready" and ctx["pinned"]
    assert ctx["prefix_id"].startswith("red-context-") and ctx["hot_start"] is not None
    assert same_pin(view["context_after"], ctx)  # still the pinned prefix at the end
    # Each prompt = the shared context (HOT) + the agent's own messages (COLD).
    assert all(t["prompt_tokens"] > ctx["length"] for t in view["turns"])
    assert view["result"] == view["turns"][-1]["text"] and view["calls_per_run"] == 9

    d = delta(settled(base_url), before)
    replicas = len(stats(base_url)["replicas"])
    assert d["registrations"] == replicas  # registered once, on each replica
    # Every agent call hit the run's context (other hits: calls of earlier tests, such
    # as a cancelled run's, that ended after the baseline)
    assert d[f"prefix:{ctx['prefix_id']}"] == 9 and d["hits"] >= 9, d
    assert d["hit_tokens"] >= 9 * (ctx["length"] // 16 * 16), d  # its whole hash chunks
    assert "bind_errors" not in d and "cold_fallbacks" not in d, d
    assert metric_hits(ops) - metric_before >= 9  # /metrics counts them too
    contexts = [p for p in red.get("/v1/prefixes").json()["data"] if p["kind"] == "context"]
    assert [p["prefix_id"] for p in contexts] == [ctx["prefix_id"]] and contexts[0]["pinned"]

    # Running the workflow again reuses the pin: no registration, the same prefix.
    before = settled(base_url)
    again = wait_run(red, "red", red.post("/teams/red/runs", json=body).json()["run_id"])
    assert again["status"] == "succeeded" and again["context"]["reused"]
    assert same_pin(again["context"], ctx)
    d = delta(settled(base_url), before)
    assert "registrations" not in d and d[f"prefix:{ctx['prefix_id']}"] == 9, d

    listed = red.get("/teams/red/runs").json()["data"]
    assert {run["run_id"], again["run_id"]} <= {r["run_id"] for r in listed}
    assert all(r["team"] == "red" for r in listed)


def test_events_stream_the_run(client: Client) -> None:
    blue = client("blue")
    run_id = blue.post("/teams/blue/runs", json={"spec_name": "plan"}).json()["run_id"]
    events: list[tuple[str, str]] = []
    with blue.stream("GET", f"/teams/blue/runs/{run_id}/events") as s:
        assert s.status_code == 200
        assert s.headers["content-type"].startswith("text/event-stream")
        kind = ""
        for line in s.iter_lines():
            if line.startswith("event: "):
                kind = line[len("event: "):]
            elif line.startswith("data: "):
                events.append((kind, line[len("data: "):]))
    kinds = [k for k, _ in events]
    assert kinds[0] == "status" and kinds[1] == "context" and kinds[-1] == "end"
    assert kinds.count("turn") == 5 and kinds.count("round") == 1  # plan, 3 executors, join
    assert '"status": "succeeded"' in events[-2][1]
    # Reconnecting after the 3rd event gives the rest, from the store.
    with blue.stream("GET", f"/teams/blue/runs/{run_id}/events",
                     headers={"Last-Event-ID": "3"}) as s:
        ids = [int(line[4:]) for line in s.iter_lines() if line.startswith("id: ")]
    assert ids == list(range(4, len(events)))
