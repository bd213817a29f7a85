"""A bound team chat costs no control-plane call: the replica answers it from its local
view of the registry and of its engine's prefixes (``sync.py``), and puts the context's
tokens in place of a rendered placeholder instead of tokenizing the context again
(``engine.py``). The suite's Serve app (two CPU replicas, tests/conftest.py)."""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from tests.platform.conftest import fresh_stats, stats

pytestmark = [pytest.mark.ray, pytest.mark.vllm]
Client = Callable[[str | None], httpx.Client]
MODEL = "tiny-llama"


def request_path(s: dict[str, Any]) -> dict[str, int]:
    """The replicas' request-path counters, summed."""
    out: dict[str, int] = {}
    for rep in s["replicas"].values():
        for k, v in rep["request_path"].items():
            out[k] = out.get(k, 0) + v
    return out


def ask(text: str, **kw: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": text}], "max_tokens": 6,
            "temperature": 0, **kw}


def test_team_chat_equals_the_whole_conversation_rendered(client: Client) -> None:
    """The spliced prompt is the prompt of the same conversation rendered in full: the
    same prompt length and the same greedy answer as a plain chat that sends the
    context itself."""
    blue = client("blue")  # its context comes from the app's config
    ctx = blue.get("/teams/blue/context").json()
    assert ctx["state"] == "ready", ctx
    for i in range(3):
        team = blue.post("/teams/blue/v1/chat/completions", json=ask(f"agent {i}: status?"))
        plain_body = ask(f"agent {i}: status?")
        plain_body["messages"].insert(0, {"role": "system", "content": ctx["text"]})
        plain = blue.post("/v1/chat/completions", json=plain_body)
        assert team.status_code == plain.status_code == 200, (team.text, plain.text)
        t, p = team.json(), plain.json()
        assert t["usage"]["prompt_tokens"] == p["usage"]["prompt_tokens"] > ctx["length"]
        assert t["choices"][0]["message"]["content"] == p["choices"][0]["message"]["content"]


def test_bound_team_chats_make_no_control_plane_call(client: Client, base_url: str) -> None:
    blue = client("blue")
    assert blue.get("/teams/blue/context").json()["state"] == "ready"
    for i in range(4):  # whichever replica Serve picks has served a team chat
        assert blue.post("/teams/blue/v1/chat/completions", json=ask(f"warm {i}")).is_success
    before = request_path(fresh_stats(base_url, stats(base_url)))
    n = 12

    def one(i: int) -> int:
        if i % 2:  # streamed too: the same path, with SSE batched across the handle
            with blue.stream("POST", "/teams/blue/v1/chat/completions",
                            json=ask(f"agent {i}", stream=True)) as r:
                events = [ln for ln in r.iter_lines() if ln.startswith("data: ")]
                assert events[-1] == "data: [DONE]", events
                assert all("error" not in json.loads(e[6:]) for e in events[:-1]), events
                return r.status_code
        return blue.post("/teams/blue/v1/chat/completions", json=ask(f"agent {i}")).status_code

    with ThreadPoolExecutor(4) as pool:
        assert list(pool.map(one, range(n))) == [200] * n
    after = request_path(fresh_stats(base_url, stats(base_url)))
    assert after["hub_calls"] == before["hub_calls"], (before, after)
    assert after["engine_calls"] == before["engine_calls"], (before, after)
    assert after["slow_binds"] == before["slow_binds"], (before, after)
    assert after["fast_binds"] - before["fast_binds"] == n, (before, after)
    assert after["context_spliced"] - before["context_spliced"] == n, (before, after)
    assert after["context_rendered"] == before["context_rendered"], (before, after)


def test_an_unknown_prefix_takes_the_slow_path(client: Client, base_url: str) -> None:
    """A miss asks the registry (and answers its 404); a known prefix then binds fast."""
    gold = client("gold")
    before = request_path(fresh_stats(base_url, stats(base_url)))
    body = {"model": MODEL, "prompt": [5, 6, 7, 8], "max_tokens": 2,
            "vllm_xargs": {"granikv_prefix_id": "gold-nowhere"}}
    r = gold.post("/v1/completions", json=body)
    assert r.status_code == 404, r.text
    after = request_path(fresh_stats(base_url, stats(base_url)))
    assert after["slow_binds"] - before["slow_binds"] == 1
    assert after["hub_calls"] - before["hub_calls"] == 1


def test_a_team_chat_says_whether_it_was_served_from_hot(client: Client) -> None:
    """``x-granikv-prefix`` on every team chat, and ``cached_tokens`` counting the HOT
    context (vLLM's prompt_tokens_details, on by default on the platform)."""
    blue = client("blue")
    ctx = blue.get("/teams/blue/context").json()
    r = blue.post("/teams/blue/v1/chat/completions", json=ask("cached?"))
    assert r.status_code == 200, r.text
    assert r.headers["x-granikv-prefix"] == "hit"
    details = r.json()["usage"]["prompt_tokens_details"]
    # a hit reads the context's whole 16-token hash chunks from HOT
    assert details["cached_tokens"] >= ctx["length"] // 16 * 16, details
    with blue.stream("POST", "/teams/blue/v1/chat/completions",
                     json=ask("streamed", stream=True)) as s:
        assert s.status_code == 200 and s.headers["x-granikv-prefix"] == "hit"
        assert [ln for ln in s.iter_lines() if ln.startswith("data: ")][-1] == "data: [DONE]"
    plain = client("plain")
    assert plain.get("/teams/plain/context").json()["error"]["type"] == "NoTeamContextError"
    r = plain.post("/teams/plain/v1/chat/completions", json=ask("no context"))
    assert r.status_code == 200, r.text
    assert r.headers["x-granikv-prefix"] == "miss; reason=no-context"


def test_a_chat_naming_its_context_is_never_served_with_another(client: Client) -> None:
    """``X-GraniKV-Context``: a team chat names the context its caller pinned. Right
    after the context changed through one replica, the other one's view still has the
    old one until its next reconcile; a chat naming the new one is served with it on
    either replica, and a chat naming the old one is a 409, not a chat with the new."""
    gold = client("gold")
    for n in (3, 9, 5, 12):  # contexts of different lengths: prompt_tokens tells them apart
        ctx = gold.put("/teams/gold/context", json={"text": "Gold rule. " * n * 8}).json()
        named = {"X-GraniKV-Context": ctx["prefix_id"]}
        solo = gold.post("/teams/gold/v1/chat/completions", json=ask("x", max_tokens=1))
        # whichever replica answers, right away and concurrently
        with ThreadPoolExecutor(4) as pool:
            got = list(pool.map(lambda h: gold.post(
                "/teams/gold/v1/chat/completions", json=ask("x", max_tokens=1),
                headers=h), [named] * 8))
        for r in got:
            assert r.status_code == 200, r.text
            assert r.json()["usage"]["prompt_tokens"] == got[0].json()["usage"]["prompt_tokens"]
        assert got[0].json()["usage"]["prompt_tokens"] > ctx["length"]
        assert solo.status_code == 200, solo.text
        stale = {"X-GraniKV-Context": f"{ctx['prefix_id']}-gone"}
        r = gold.post("/teams/gold/v1/chat/completions", json=ask("x"), headers=stale)
        assert r.status_code == 409, r.text
        assert "its context changed" in r.json()["error"]["message"], r.text
