"""HOT filling by one team, on the real Serve app (the session app of tests/conftest.py).

Red pins prefixes until the registry refuses one (409, naming red's HOT budget); blue's
new context is then HOT on every replica (``x-granikv-prefix: hit``), gold's unpinned
prefix is still HOT on every replica, and no replica holds more of red than red's
budget. Everything made here is removed, and blue's context put back.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.conftest import auth, stats, wait_until
from tests.reliability.figures import record

pytestmark = [pytest.mark.ray, pytest.mark.vllm]
MODEL = "tiny-llama"
PLEN = 500  # tokens of each of red's prefixes


def tokens(seed: int, n: int) -> list[int]:
    return [(seed * 7919 + 31 * j) % 1000 + 10 for j in range(n)]


def states(s: dict[str, Any], pid: str) -> set[str]:
    return {rep["prefix_hits"].get(pid, {}).get("state", "missing")
            for rep in s["replicas"].values()}


def ready_everywhere(url: str, pid: str) -> dict[str, Any]:
    def ok() -> dict[str, Any] | None:
        s = stats(url)
        return s if states(s, pid) == {"ready"} else None
    return wait_until(ok, 60, f"{pid} READY on every replica", every_s=0.5)  # type: ignore[no-any-return]


def team_hot(s: dict[str, Any], team: str) -> list[dict[str, int]]:
    return [rep["granikv"]["teams"].get(team, {"used": 0, "budget": 0})
            for rep in s["replicas"].values()]


def test_one_team_filling_hot_neither_starves_nor_evicts_another(base_url: str) -> None:
    red, blue, gold = (httpx.Client(base_url=base_url, headers=auth(t), timeout=120)
                       for t in ("red", "blue", "gold"))
    doc = gold.post("/v1/prefixes", json={"token_ids": tokens(1, 300),
                                          "prefix_id": "quota-gold-doc", "pin": False})
    assert doc.status_code == 201, doc.text
    ready_everywhere(base_url, "quota-gold-doc")
    budget = team_hot(stats(base_url), "red")[0]["budget"]
    placed: list[str] = []
    refused = None
    for i in range(8192 // PLEN + 2):  # more than the whole arena
        r = red.post("/v1/prefixes", json={"token_ids": tokens(100 + i, PLEN),
                                           "prefix_id": f"quota-red-{i}"})
        if r.status_code == 409:
            refused = r.json()["error"]["message"]
            break
        assert r.status_code == 201, r.text
        placed.append(f"quota-red-{i}")
    assert refused is not None, "red pinned past any budget"
    assert f"HOT budget of {budget} tokens" in refused, refused
    ctx_put = red.put("/teams/red/context", json={"text": "Red rule. " * 120})
    assert ctx_put.status_code == 409, ctx_put.text  # a context past it: refused too
    assert "a team context of" in ctx_put.json()["error"]["message"], ctx_put.text

    old_blue = blue.get("/teams/blue/context").json()["text"]
    ctx = blue.put("/teams/blue/context", json={"text": "Blue's new plan. " * 20}).json()
    after = ready_everywhere(base_url, ctx["prefix_id"])
    headers = []
    for i in range(4):
        chat = blue.post("/teams/blue/v1/chat/completions", json={
            "model": MODEL, "max_tokens": 2, "messages": [
                {"role": "user", "content": f"status {i}?"}]})
        assert chat.status_code == 200, chat.text
        headers.append(chat.headers["x-granikv-prefix"])
    assert headers == ["hit"] * 4, headers
    assert states(stats(base_url), "quota-gold-doc") == {"ready"}, "gold's prefix evicted"
    held = team_hot(after, "red")
    assert all(h["used"] <= h["budget"] == budget for h in held), held

    for pid in placed:
        assert red.delete(f"/v1/prefixes/{pid}").status_code == 200
    assert gold.delete("/v1/prefixes/quota-gold-doc").status_code == 200
    assert blue.put("/teams/blue/context", json={"text": old_blue}).status_code == 200
    record("team_hot_budget", red_budget_tokens=budget, red_prefix_tokens=PLEN,
           red_pins_accepted=len(placed), red_refusal=refused,
           red_hot_slots_per_replica=[h["used"] for h in held],
           blue_context_headers=headers, gold_unpinned_prefix="ready on every replica",
           arena_per_replica=[rep["granikv"]["hot"]["capacity"]
                              for rep in after["replicas"].values()])
    for c in (red, blue, gold):
        c.close()
