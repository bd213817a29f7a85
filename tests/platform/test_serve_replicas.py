"""Two CPU replicas: every replica that serves a team holds its HOT prefix; a killed
replica comes back with its teams' prefixes pinned again; the registry outlives its own
actor. Runs after test_serve_api.py (it restarts a replica of the shared app)."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.platform.conftest import APP, auth, counters, fresh_stats, stats, wait_until
from tests.platform.test_responses_api import continued_on, stored_before_restart

pytestmark = [pytest.mark.ray, pytest.mark.vllm]
Client = Callable[[str | None], httpx.Client]
RED_CONTEXT = (Path(__file__).resolve().parents[2] / "deploy" / "contexts" / "red.md").read_text()


def team_round(base_url: str, n: int) -> dict[str, dict[str, int]]:
    """``n`` concurrent red-team chats; per-replica counter deltas from fresh reports
    (the one before too: a stale one put earlier tests' requests into the round)."""
    before = fresh_stats(base_url, stats(base_url))
    with httpx.Client(base_url=base_url, headers=auth("red"), timeout=120) as c, \
            ThreadPoolExecutor(n) as pool:
        outs = list(pool.map(lambda i: c.post("/teams/red/v1/chat/completions", json={
            "model": "tiny-llama", "max_tokens": 4,
            "messages": [{"role": "user", "content": f"agent {i}"}]}), range(n)))
    assert [o.status_code for o in outs] == [200] * n, [o.text for o in outs]
    after = fresh_stats(base_url, stats(base_url))
    deltas = {}
    for rid, rep in after["replicas"].items():
        old = counters(before["replicas"][rid]) if rid in before["replicas"] else None
        new = counters(rep)
        deltas[rid] = {k: v - (old[k] if old else 0) for k, v in new.items()}
    return deltas


def test_every_replica_serving_the_team_holds_its_prefix(client: Client, base_url: str) -> None:
    assert client("red").put("/teams/red/context", json={"text": RED_CONTEXT}).status_code == 200
    served: dict[str, dict[str, int]] = {}
    for _ in range(4):  # Serve picks replicas by load: a few rounds reach both
        for rid, d in team_round(base_url, 12).items():
            acc = served.setdefault(rid, {k: 0 for k in d})
            for k, v in d.items():
                acc[k] += v
        if len(served) == 2 and all(d["bound_requests"] > 0 for d in served.values()):
            break
    assert len(served) == 2 and all(d["bound_requests"] > 0 for d in served.values()), served
    for rid, d in served.items():  # each replica that got requests served them from HOT
        assert d["hits"] == d["bound_requests"], (rid, d)
        assert d["bind_errors"] == 0 and d["cold_fallbacks"] == 0, (rid, d)
    for rep in stats(base_url)["replicas"].values():
        assert rep["pinned_prefixes"] >= 2 and rep["granikv"]["prefixes"]["ready"] >= 2


def test_restarted_replica_repins_the_team_prefixes(client: Client, base_url: str) -> None:
    import ray

    assert client("red").put("/teams/red/context", json={"text": RED_CONTEXT}).status_code == 200
    teams = [t["team"] for t in client("red").get("/teams").json()["data"]]
    pinned = len([p for team in teams
                  for p in client(team).get("/v1/prefixes").json()["data"] if p["pinned"]])
    kept = stored_before_restart(base_url)  # a stored response (the Responses API)
    old = set(stats(base_url)["replicas"])
    victim = sorted(old)[0]
    names = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
             if a["name"].startswith("SERVE_REPLICA::") and f"#{APP}-llm#" in a["name"]]
    (name,) = [n for n in names if n.endswith(f"#{victim}")]
    ray.kill(ray.get_actor(name, namespace="serve"), no_restart=True)

    def replaced() -> dict[str, Any] | None:
        s = stats(base_url)["replicas"]
        return s if len(s) == 2 and victim not in s and len(set(s) - old) == 1 else None

    reps = wait_until(replaced, 240, "Serve to replace the killed replica", every_s=1.0)
    (new,) = set(reps) - old
    assert reps[new]["pinned_prefixes"] == pinned  # re-pinned from the registry at start
    assert reps[new]["granikv"]["prefixes"]["ready"] >= pinned
    assert client("red").get("/teams/red/context").json()["state"] == "ready"
    hits = 0
    for _ in range(5):
        d = team_round(base_url, 8)[new]
        assert d["bind_errors"] == 0 and d["cold_fallbacks"] == 0, d
        hits += d["hits"]
        if hits:
            break
    assert hits > 0  # the new replica serves the team from its re-pinned HOT prefix
    continued_on(base_url, new, kept)  # and continues a response stored before it started


def test_registry_outlives_its_actor(client: Client, app_config: dict[str, Any]) -> None:
    import ray

    green = client("green")
    assert green.post("/v1/prefixes", json={"token_ids": [1, 2, 3, 4],
                                            "prefix_id": "green-kept"}).status_code in (200, 201)
    reg = app_config["registry"]
    ray.kill(ray.get_actor(reg["name"], namespace="granikv"), no_restart=False)
    # Ray restarts the detached actor; it reloads its state file.
    got = wait_until(lambda: _try_get(green, "/v1/prefixes/green-kept"), 60, "the registry")
    assert got["prefix_id"] == "green-kept" and got["state"] == "ready"


def _try_get(c: httpx.Client, path: str) -> dict[str, Any] | None:
    r = c.get(path)
    return r.json() if r.status_code == 200 else None  # type: ignore[no-any-return]
