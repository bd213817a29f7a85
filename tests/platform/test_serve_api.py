"""The HTTP API of a real GraniKV Serve app (two CPU replicas, the tiny model), called
with the session's API keys (tests/conftest.py). Access control has its own tests in
tests/reliability/test_access.py."""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.platform.conftest import (
    API_KEYS,
    SYNC_PERIOD_S,
    counters,
    fresh_stats,
    stats,
    wait_until,
)

pytestmark = [pytest.mark.ray, pytest.mark.vllm]
Client = Callable[[str | None], httpx.Client]
MODEL = "tiny-llama"
RED_CONTEXT = (Path(__file__).resolve().parents[2] / "deploy" / "contexts" / "red.md").read_text()


def totals(s: dict[str, Any]) -> dict[str, int]:
    out: dict[str, int] = {}
    for rep in s["replicas"].values():
        for k, v in counters(rep).items():
            out[k] = out.get(k, 0) + v
    return out


def chat_body(text: str, **kw: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": text}], "max_tokens": 8,
            "temperature": 0, **kw}


def test_models(client: Client) -> None:
    for path in ("/v1/models", "/teams/red/v1/models"):
        r = client("red").get(path)
        assert r.status_code == 200 and r.json()["data"][0]["id"] == MODEL
        assert client(None).get(path).status_code == 401  # no key


def test_chat_and_streaming_agree(client: Client) -> None:
    c = client("red")
    r = c.post("/v1/chat/completions", json=chat_body("hello there", ignore_eos=True))
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "chat.completion" and body["usage"]["completion_tokens"] == 8
    text = body["choices"][0]["message"]["content"]
    with c.stream("POST", "/v1/chat/completions",
                  json=chat_body("hello there", ignore_eos=True, stream=True)) as s:
        assert s.status_code == 200
        assert s.headers["content-type"].startswith("text/event-stream")
        events = [line[len("data: "):] for line in s.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]" and len(events) >= 3
    chunks = [json.loads(e) for e in events[:-1]]
    streamed = "".join(ch["choices"][0]["delta"].get("content") or ""
                       for ch in chunks if ch["choices"])
    assert streamed == text  # greedy: the same tokens, whether streamed or not


def test_completions_text_and_tokens(client: Client) -> None:
    c = client("blue")
    for prompt in ("The quick brown fox", [1, 300, 301, 302]):
        r = c.post("/v1/completions", json={"model": MODEL, "prompt": prompt, "max_tokens": 5,
                                             "ignore_eos": True, "temperature": 0})
        assert r.status_code == 200, r.text
        assert r.json()["usage"]["completion_tokens"] == 5


def test_prefix_lifecycle_and_bound_completions(client: Client, base_url: str) -> None:
    green = client("green")
    tokens = [1, *range(100, 400)]  # 301 tokens
    r = green.post("/v1/prefixes", json={"token_ids": tokens, "prefix_id": "green-doc"})
    assert r.status_code == 201, r.text
    rec = r.json()
    assert (rec["prefix_id"], rec["team"], rec["length"]) == ("green-doc", "green", 301)
    assert rec["state"] == "ready" and rec["pinned"] and isinstance(rec["hot_start"], int)
    again = green.post("/v1/prefixes", json={"token_ids": tokens, "prefix_id": "green-doc"})
    assert again.status_code == 200 and again.json()["prefix_id"] == "green-doc"
    listed = green.get("/v1/prefixes").json()["data"]
    assert "green-doc" in [p["prefix_id"] for p in listed]
    assert all(p["team"] == "green" for p in listed)
    assert green.get("/v1/prefixes/green-doc").json()["state"] == "ready"

    before = stats(base_url)
    xargs = {"granikv_prefix_id": "green-doc"}
    with ThreadPoolExecutor(4) as pool:
        outs = list(pool.map(lambda i: green.post("/v1/completions", json={
            "model": MODEL, "prompt": [*tokens, 500 + i, 600 + i], "max_tokens": 4,
            "vllm_xargs": xargs}), range(4)))
    assert [o.status_code for o in outs] == [200] * 4, [o.text for o in outs]
    after = totals(fresh_stats(base_url, stats(base_url)))
    assert after["hits"] - totals(before)["hits"] >= 4
    assert after["hit_tokens"] - totals(before)["hit_tokens"] >= 4 * (301 // 16 * 16)
    assert after["bind_errors"] == totals(before)["bind_errors"]

    text = green.post("/v1/prefixes", json={"text": "A shared document.", "pin": False})
    assert text.status_code == 201 and text.json()["pinned"] is False
    assert text.json()["prefix_id"].startswith("green-")

    assert green.delete("/v1/prefixes/green-doc").status_code == 200
    assert green.get("/v1/prefixes/green-doc").status_code == 404
    assert green.delete("/v1/prefixes/green-doc").status_code == 404
    # A bound request is checked against each replica's local view of the registry (no
    # registry call), which follows a delete made through another replica within a sync
    # period: then every replica refuses it.
    def refused() -> bool:
        gone = [green.post("/v1/completions", json={
            "model": MODEL, "prompt": [*tokens, 7], "max_tokens": 2, "vllm_xargs": xargs})
            for _ in range(4)]
        return all(g.status_code == 404 and "green-doc" in g.json()["error"]["message"]
                   for g in gone)

    wait_until(refused, 10 * SYNC_PERIOD_S + 10, "every replica refusing the deleted prefix",
               every_s=SYNC_PERIOD_S)


def test_teams_cannot_touch_each_others_prefixes(client: Client) -> None:
    red, blue = client("red"), client("blue")
    r = red.post("/v1/prefixes", json={"token_ids": [1, 5, 6, 7, 8], "prefix_id": "red-secret"})
    assert r.status_code in (200, 201), r.text
    # ids are scoped by team: another team's is as absent as an unknown one (404)
    assert blue.get("/v1/prefixes/red-secret").status_code == 404
    assert blue.delete("/v1/prefixes/red-secret").status_code == 404
    assert "red-secret" not in [p["prefix_id"] for p in blue.get("/v1/prefixes").json()["data"]]
    use = blue.post("/v1/completions", json={"model": MODEL, "prompt": [1, 5, 6, 7, 8, 9],
                                             "max_tokens": 2,
                                             "vllm_xargs": {"granikv_prefix_id": "red-secret"}})
    assert use.status_code == 404 and use.json()["error"]["type"] == "NotFoundError"
    steal = blue.post("/v1/prefixes", json={"token_ids": [1, 9], "prefix_id": "red-secret"})
    assert steal.status_code == 201 and steal.json()["team"] == "blue"  # blue's own
    assert blue.delete("/v1/prefixes/red-secret").status_code == 200
    got = red.get("/v1/prefixes/red-secret")  # untouched
    assert got.status_code == 200 and got.json()["length"] == 5
    assert blue.get("/v1/prefixes/no-such-prefix").status_code == 404
    assert client(None).get("/v1/prefixes").status_code == 401
    assert blue.get("/teams/red/context").status_code == 403  # header vs path
    assert blue.get("/teams/nobody/context").status_code == 404  # not a configured team


@pytest.mark.parametrize(("path", "body", "status", "needle"), [
    ("/v1/chat/completions", {"model": MODEL}, 422, "messages"),
    ("/v1/chat/completions", {"model": MODEL, "messages": "hi"}, 422, "messages"),
    ("/v1/chat/completions", chat_body("x", max_tokens="many"), 422, "max_tokens"),
    ("/v1/completions", {"model": MODEL}, 422, "prompt"),
    ("/v1/prefixes", {"text": "a", "token_ids": [1]}, 422, "exactly one"),
    ("/v1/prefixes", {}, 422, "exactly one"),
    ("/v1/prefixes", {"token_ids": []}, 422, "token_ids"),
    ("/v1/prefixes", {"token_ids": [1], "prefix_id": "bad id!"}, 422, "prefix_id"),
    ("/v1/prefixes", {"token_ids": [1, 5000]}, 400, "[0, 1024)"),
    ("/v1/prefixes", {"token_ids": [1] * 3000}, 400, "limits.max_prefix_tokens"),
    ("/v1/prefixes", {"token_ids": [1], "surprise": True}, 422, "surprise"),
    ("/v1/chat/completions", chat_body("x", vllm_xargs={"granikv_register": 1}), 400,
     "POST /v1/prefixes"),
    ("/v1/chat/completions", chat_body("x", vllm_xargs={"granikv_team": "blue"}), 403,
     "not the calling team"),
    ("/v1/chat/completions", {**chat_body("x"), "model": "gpt-9"}, 404, "gpt-9"),
])
def test_bad_bodies_get_clear_errors(client: Client, path: str, body: dict[str, Any],
                                     status: int, needle: str) -> None:
    r = client("red").post(path, json=body)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert needle in err["message"] and err["code"] == status and err["type"]


def test_malformed_json_is_400(client: Client) -> None:
    r = client("red").post("/v1/prefixes", content=b"{not json",
                           headers={"content-type": "application/json"})
    assert r.status_code == 400 and "not valid JSON" in r.json()["error"]["message"]


def test_team_root_puts_the_context_first_and_hits_it(client: Client, base_url: str) -> None:
    red = client("red")
    put = red.put("/teams/red/context", json={"text": RED_CONTEXT})
    assert put.status_code == 200, put.text
    ctx = put.json()
    assert ctx["state"] == "ready" and ctx["pinned"] and ctx["length"] > 300
    assert red.get("/teams/red/context").json()["text"] == RED_CONTEXT
    before = totals(stats(base_url))
    agent = client("red")  # the key names the team; no header needed
    with ThreadPoolExecutor(6) as pool:
        outs = list(pool.map(lambda i: agent.post("/teams/red/v1/chat/completions",
                                                  json=chat_body(f"agent {i}: findings?")),
                             range(6)))
    assert [o.status_code for o in outs] == [200] * 6, [o.text for o in outs]
    # Each prompt = context tokens + the agent's own: usage shows the shared part.
    assert all(o.json()["usage"]["prompt_tokens"] > ctx["length"] for o in outs)
    after = totals(fresh_stats(base_url, stats(base_url)))
    assert after["hits"] - before["hits"] >= 6
    # a hit reads the context's whole 16-token hash chunks from HOT
    assert after["hit_tokens"] - before["hit_tokens"] >= 6 * (ctx["length"] // 16 * 16)
    assert after["bind_errors"] == before["bind_errors"]  # prompts start with the prefix
    assert after["cold_fallbacks"] == before["cold_fallbacks"]


def test_prompt_logprobs_on_the_team_root_cover_the_whole_prompt(client: Client,
                                                                  base_url: str) -> None:
    """Found by the API fuzzer: a team-route request with ``prompt_logprobs`` read the
    HOT context without computing its positions, got garbage token ids for them, and
    the detokenizer's OverflowError killed the replica's engine (HTTP 500, then every
    request to that replica). Such a request now skips HOT, as stock vLLM skips its
    prefix cache for it, and its prompt logprobs are real."""
    blue = client("blue")
    before = totals(fresh_stats(base_url, stats(base_url)))
    r = blue.post("/teams/blue/v1/chat/completions",
                  json=chat_body("what is left to do?", max_tokens=2, prompt_logprobs=1))
    assert r.status_code == 200, r.text
    body = r.json()
    plp = body["prompt_logprobs"]
    ctx_len = blue.get("/teams/blue/context").json()["length"]
    assert len(plp) == body["usage"]["prompt_tokens"] > ctx_len > 0 and plp[0] is None
    for pos in plp[1:]:
        assert 1 <= len(pos) <= 2, pos  # the prompt token, and the top-1 if it differs
        for tid, lp in pos.items():
            assert 0 <= int(tid) < 1024 and lp["logprob"] <= 0.0, (tid, lp)
    after = totals(fresh_stats(base_url, stats(base_url)))
    assert after["prefix_reads_skipped"] - before["prefix_reads_skipped"] == 1
    assert after["hits"] == before["hits"]
    again = blue.post("/teams/blue/v1/chat/completions", json=chat_body("and now?"))
    assert again.status_code == 200, again.text  # the engine is alive


def test_langchain_chatopenai_on_the_team_root(base_url: str) -> None:
    from langchain_openai import ChatOpenAI
    from pydantic import SecretStr

    llm = ChatOpenAI(base_url=f"{base_url}/teams/blue/v1", api_key=SecretStr(API_KEYS["blue"]),
                     model=MODEL, temperature=0, max_tokens=6)  # type: ignore[call-arg]
    before = totals(stats(base_url))
    answer = llm.invoke("Plan the release in three steps.")
    assert isinstance(answer.content, str)
    after = totals(fresh_stats(base_url, stats(base_url)))
    assert after["hits"] > before["hits"]  # blue's context came from deploy/local.yaml


def test_config_seeded_context_is_ready(client: Client) -> None:
    r = client("blue").get("/teams/blue/context")
    assert r.status_code == 200, r.text
    assert r.json()["state"] == "ready" and r.json()["text"].startswith("You are a planner")
    assert client("gold").get("/teams").json()["data"][0]["team"] == "red"


def test_metrics_endpoint(client: Client) -> None:
    client("red").post("/teams/red/v1/chat/completions", json=chat_body("one more"))
    r = client("@admin").get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    fams = {f.name: f for f in text_string_to_metric_families(r.text)}
    assert fams["granikv_replicas"].samples[0].value == 2
    for name in ("granikv_hot_used_slots", "granikv_cold_capacity_slots",
                 "granikv_pinned_prefixes",
                 "granikv_prefix_hits", "granikv_prefix_misses", "granikv_dispatch_groups",
                 "granikv_dispatch_regimes", "granikv_generation_tokens_per_second",
                 "granikv_queue_depth"):
        assert name in fams, name
    assert sum(s.value for s in fams["granikv_pinned_prefixes"].samples) >= 2
    used = [s.value for s in fams["granikv_hot_used_slots"].samples]
    assert len(used) == 2 and min(used) > 0


def test_openapi_lists_the_routes(client: Client) -> None:
    paths = client("@admin").get("/openapi.json").json()["paths"]
    for p in ("/v1/chat/completions", "/v1/completions", "/v1/models", "/v1/prefixes",
              "/v1/prefixes/{prefix_id}", "/teams/red/context", "/teams/red/v1/chat/completions",
              "/metrics"):
        assert p in paths, p
