"""Access and limits on the real Serve app (tests/conftest.py's session app, its API keys
and its ``LIMITS``).

- Every route of the platform's own OpenAPI document refuses a request without a key
  and with an unknown key (401), except /healthz and /readyz; the operator key reads
  only /metrics, /v1/granikv/stats, /teams and the OpenAPI document (which names every
  team), and an /openapi.json asked for without it is 401 and names no team.
- Two teams, both ways: neither can read, use (bind a request to), pin, delete or take
  over the other's prefix, context or runs (its ids are the other's own: registering
  one gives a prefix of one's own); the victim's prefix and runs are untouched
  afterwards and its engine hit counters did not move.
- Request limits: body size (413, announced or streamed), prompt length, prefix size,
  max_tokens and n (400), each naming the limit; also for the agents' calls, which
  reach the replicas through a Serve handle and not the HTTP routes.
"""

from __future__ import annotations

import re
import subprocess
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from granikv_agents import load_spec
from granikv_platform.auth import OPERATOR
from tests.conftest import API_KEYS, LIMITS, REPO, auth, fresh_stats, stats
from tests.reliability.figures import record

pytestmark = [pytest.mark.ray, pytest.mark.vllm]
Client = Callable[[str | None], httpx.Client]
MODEL = "tiny-llama"
OPEN_PATHS = {"/healthz", "/readyz"}
OPS_PATHS = {"/metrics", "/v1/granikv/stats", "/teams"}  # the operator key's
FIGURES: dict[str, Any] = {}


@pytest.fixture(scope="module", autouse=True)
def _figures(base_url: str) -> Iterator[None]:
    """After this file's tests: what they tried, into the figures file."""
    yield
    if FIGURES:
        record("access", **FIGURES)


def routes(base_url: str) -> list[tuple[str, str]]:
    """(method, path) of every operation in the app's OpenAPI document, path parameters
    filled in with well-formed values."""
    doc = httpx.get(f"{base_url}/openapi.json", headers=auth(OPERATOR), timeout=30).json()
    out = []
    for path, ops in doc["paths"].items():
        concrete = path.replace("{prefix_id}", "red-probe").replace(
            "{run_id}", "run-0000000000000000").replace("{thread_id}", "thread-probe").replace(
            "{assistant_id}", "chat").replace("{model_id}", MODEL).replace(
            "{checkpoint_id}", "checkpoint-probe").replace("{response_id}", "resp_probe")
        assert "{" not in concrete, f"fill in the parameter of {path}"
        out += [(m.upper(), concrete) for m in ops if m in ("get", "post", "put", "delete")]
    return out


def is_openai_error(r: httpx.Response, status: int) -> bool:
    err = r.json().get("error", {})
    return r.status_code == status and err.get("code") == status and bool(err.get("message"))


def test_every_route_needs_a_valid_key(base_url: str) -> None:
    ops = routes(base_url)
    assert len(ops) >= 40, ops  # 5 global groups + 10 routes per configured team
    seen: Counter[str] = Counter()
    with httpx.Client(base_url=base_url, timeout=60) as c:
        for method, path in ops:
            if path in OPEN_PATHS:
                continue
            for headers in ({}, {"Authorization": "Bearer gk-" + "0" * 43},
                            {"Authorization": f"Basic {API_KEYS['red']}"},
                            {"X-GraniKV-Team": "red"}):  # a header names no one
                r = c.request(method, path, headers=headers, json={})
                assert is_openai_error(r, 401), (method, path, headers, r.text)
                assert r.headers["www-authenticate"] == "Bearer"
                seen["refused_401"] += 1
            r = c.request(method, path, headers=auth("@admin"), json={})
            if path in OPS_PATHS:
                assert r.status_code == 200, (method, path, r.text)
            else:  # an operator key is not a team's
                assert is_openai_error(r, 403), (method, path, r.text)
                seen["operator_refused_403"] += 1
        for path in ("/metrics", "/v1/granikv/stats"):
            r = c.get(path, headers=auth("red"))
            assert is_openai_error(r, 403) and "operator key" in r.json()["error"]["message"]
            seen["team_refused_403"] += 1
        assert c.get("/healthz").status_code == 200 and c.get("/readyz").status_code == 200
        for path in ("/openapi.json", "/docs"):  # the document names every team
            for headers in ({}, auth("red")):
                r = c.get(path, headers=headers)
                assert r.status_code in (401, 403) and "/teams/blue" not in r.text, path
                assert r.json()["error"]["request_id"] == r.headers["x-request-id"]
            assert c.get(path, headers=auth(OPERATOR)).status_code == 200, path
            seen["document_refused"] += 2
    FIGURES["routes"] = {"operations_in_openapi": len(ops), **seen}


def small_run(team: str, context: str) -> dict[str, Any]:
    """review.yaml cut to one reviewer and the synthesizer, as ``team``, over the team's
    current context (so that it is reused, not replaced)."""
    spec = load_spec(REPO / "deploy" / "teams" / "review.yaml")
    agents = [spec.agents[0], spec.agents[-1]]
    return spec.model_copy(update={
        "team": team, "context": context, "agents": agents,
        "sampling": spec.sampling.model_copy(update={"max_tokens": 4})}).model_dump(mode="json")


@pytest.fixture(scope="module")
def owned(base_url: str) -> Iterator[dict[str, dict[str, str]]]:
    """Per team (red, blue): a pinned prefix of its own and a finished run."""
    from tests.agents.helpers import wait_run

    out: dict[str, dict[str, str]] = {}
    with httpx.Client(base_url=base_url, timeout=120) as c:
        for i, team in enumerate(("red", "blue")):
            h = auth(team)
            r = c.post("/v1/prefixes", headers=h, json={
                "token_ids": [11 + i, *range(100, 160)], "prefix_id": f"{team}-owned"})
            assert r.status_code in (200, 201), r.text
            current = c.get(f"/teams/{team}/context", headers=h).json()
            context = current.get("text") or f"Team {team}: answer in one line."
            start = c.post(f"/teams/{team}/runs", headers=h,
                           json={"spec": small_run(team, context)})
            assert start.status_code == 201, start.text
            out[team] = {"prefix": f"{team}-owned", "run": start.json()["run_id"]}
        for team, o in out.items():
            with httpx.Client(base_url=base_url, headers=auth(team), timeout=60) as tc:
                assert wait_run(tc, team, o["run"])["status"] == "succeeded"
    yield out
    with httpx.Client(base_url=base_url, timeout=60) as c:
        for team, o in out.items():
            c.delete(f"/v1/prefixes/{o['prefix']}", headers=auth(team))


def prefix_hits(url: str, pid: str, after: dict[str, Any]) -> int:
    s = fresh_stats(url, after)
    return sum(r["prefix_hits"].get(pid, {}).get("hits", 0) for r in s["replicas"].values())


@pytest.mark.parametrize(("me", "victim"), [("red", "blue"), ("blue", "red")])
def test_a_team_cannot_touch_another_teams_prefixes_or_runs(
        base_url: str, owned: dict[str, dict[str, str]], me: str, victim: str) -> None:
    pid, run = owned[victim]["prefix"], owned[victim]["run"]
    s0 = stats(base_url)
    hits0 = prefix_hits(base_url, pid, s0)
    chat = {"model": MODEL, "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}
    theirs = [11 + ("red", "blue").index(victim), *range(100, 160)]  # the victim's tokens
    steal = {"model": MODEL, "max_tokens": 2, "prompt": [*theirs, 300, 301]}
    # Ids are scoped by team: another team's prefix or run id is as absent as no id
    # (404); another team's route, team header or xargs team is refused (403).
    attempts: list[tuple[str, str, dict[str, Any] | None, dict[str, str], int]] = [
        ("GET", f"/v1/prefixes/{pid}", None, {}, 404),
        ("DELETE", f"/v1/prefixes/{pid}", None, {}, 404),
        ("POST", "/v1/chat/completions", {**chat, "vllm_xargs": {"granikv_prefix_id": pid}},
         {}, 404),
        ("POST", "/v1/completions", {**steal, "vllm_xargs": {"granikv_prefix_id": pid}}, {},
         404),
        ("POST", "/v1/completions", {**steal, "vllm_xargs": {"granikv_team": victim}}, {}, 403),
        ("GET", "/v1/prefixes", None, {"X-GraniKV-Team": victim}, 403),  # a header is no key
        ("GET", f"/teams/{victim}/context", None, {}, 403),
        ("PUT", f"/teams/{victim}/context", {"text": "mine now"}, {}, 403),
        ("POST", f"/teams/{victim}/v1/chat/completions", chat, {}, 403),
        ("GET", f"/teams/{victim}/v1/models", None, {}, 403),
        ("GET", f"/teams/{victim}/runs", None, {}, 403),
        ("POST", f"/teams/{victim}/runs", {"spec_name": "review"}, {}, 403),
        ("GET", f"/teams/{victim}/runs/{run}", None, {}, 403),
        ("GET", f"/teams/{victim}/runs/{run}/events", None, {}, 403),
        ("POST", f"/teams/{victim}/runs/{run}/resume", None, {}, 403),
        ("GET", f"/teams/{me}/runs/{run}", None, {}, 404),  # its own route, the other's run
        ("GET", f"/teams/{me}/runs/{run}/events", None, {}, 404),
        ("POST", f"/teams/{me}/runs/{run}/resume", None, {}, 404),
    ]
    with httpx.Client(base_url=base_url, headers=auth(me), timeout=60) as c:
        for method, path, body, extra, status in attempts:
            r = c.request(method, path, json=body, headers=extra)
            assert is_openai_error(r, status), (me, method, path, r.status_code, r.text)
        # The same id, registered: a prefix of its own, which it then deletes.
        take = c.post("/v1/prefixes", json={"token_ids": [1, 2, 3], "prefix_id": pid})
        assert take.status_code == 201 and take.json()["team"] == me, take.text
        assert c.delete(f"/v1/prefixes/{pid}").status_code == 200
        # The victim's tokens, unnamed: served, but never from the victim's prefix.
        r = c.post("/v1/completions", json=steal)
        assert r.status_code == 200, r.text
        mine = c.get("/v1/prefixes").json()["data"]
        assert mine and all(p["team"] == me for p in mine) and pid not in {
            p["prefix_id"] for p in mine}
        assert run not in {r["run_id"] for r in c.get(f"/teams/{me}/runs").json()["data"]}
    with httpx.Client(base_url=base_url, headers=auth(victim), timeout=60) as v:
        got = v.get(f"/v1/prefixes/{pid}").json()
        assert got["state"] == "ready" and got["pinned"] and got["team"] == victim
        assert v.get(f"/teams/{victim}/runs/{run}").json()["status"] == "succeeded"
        assert v.get(f"/teams/{victim}/context").json()["text"] != "mine now"
    assert prefix_hits(base_url, pid, stats(base_url)) == hits0  # never served to `me`
    FIGURES.setdefault("isolation", {})[f"{me}->{victim}"] = {
        f"refused_{code}": sum(1 for *_, status in attempts if status == code)
        for code in (403, 404)} | {"own_prefix_under_their_id": 1}


def long_text(tokens_at_least: int, c: httpx.Client) -> str:
    """A chat message whose prompt has at least ``tokens_at_least`` tokens."""
    word = "lorem ipsum dolor "
    text = word * 8
    while True:
        r = c.post("/v1/completions", json={"model": MODEL, "prompt": text, "max_tokens": 1})
        n = r.json()["usage"]["prompt_tokens"] if r.status_code == 200 else tokens_at_least
        if n >= tokens_at_least:
            return text
        text = word * (len(text) // len(word) * tokens_at_least // max(n, 1) + 8)


def test_request_limits_are_clear_4xx(base_url: str) -> None:
    limits: Counter[str] = Counter()

    def refused(r: httpx.Response, status: int, needle: str) -> None:
        assert is_openai_error(r, status), r.text
        assert needle in r.json()["error"]["message"], r.text
        limits[needle] += 1

    big = LIMITS["max_body_bytes"]
    with httpx.Client(base_url=base_url, headers=auth("chaos"), timeout=120) as c:
        # Body size: announced by Content-Length, and streamed (chunked, no length).
        body = b'{"model": "tiny-llama", "prompt": "' + b"x" * big + b'"}'
        for path in ("/v1/completions", "/v1/prefixes", "/teams/chaos/runs"):
            refused(c.post(path, content=body, headers={"content-type": "application/json"}),
                    413, "limits.max_body_bytes")
            refused(c.post(path, content=iter([body[:1000], body[1000:]]),
                           headers={"content-type": "application/json"}),
                    413, "limits.max_body_bytes")
        # Prompt length, after the chat template (and the team context on team routes).
        cap = LIMITS["max_prompt_tokens"]
        prompt = [7] * (cap + 1)
        refused(c.post("/v1/completions", json={"model": MODEL, "prompt": prompt,
                                                "max_tokens": 1}),
                400, "limits.max_prompt_tokens")
        refused(c.post("/v1/completions", json={"model": MODEL, "prompt": prompt,
                                                "max_tokens": 1, "stream": True}),
                400, "limits.max_prompt_tokens")
        ok = c.post("/v1/completions", json={"model": MODEL, "prompt": prompt[:cap],
                                             "max_tokens": 1})
        assert ok.status_code == 200 and ok.json()["usage"]["prompt_tokens"] == cap, ok.text
        text = long_text(cap + 1, c)
        for path in ("/v1/chat/completions", "/teams/chaos/v1/chat/completions"):
            refused(c.post(path, json={"model": MODEL, "max_tokens": 1, "messages": [
                {"role": "user", "content": text}]}), 400, "limits.max_prompt_tokens")
        # Prefix size: token ids and a team context.
        plim = LIMITS["max_prefix_tokens"]
        refused(c.post("/v1/prefixes", json={"token_ids": [5] * (plim + 1)}), 400,
                "limits.max_prefix_tokens")
        fits = c.post("/v1/prefixes", json={"token_ids": [5] * plim, "prefix_id": "chaos-max"})
        assert fits.status_code in (200, 201), fits.text
        assert c.delete("/v1/prefixes/chaos-max").status_code == 200
        refused(c.put("/teams/chaos/context", json={"text": text}), 400,
                "limits.max_prefix_tokens")
        # Generation: max_tokens, n (a request without max_tokens gets vLLM's default:
        # tests/platform/test_openai_surface.py).
        msg = [{"role": "user", "content": "count"}]
        refused(c.post("/v1/chat/completions", json={
            "model": MODEL, "messages": msg, "max_tokens": LIMITS["max_tokens"] + 1}),
            400, "limits.max_tokens")
        refused(c.post("/v1/chat/completions", json={
            "model": MODEL, "messages": msg, "max_completion_tokens": 10**6}),
            400, "limits.max_tokens")
        refused(c.post("/v1/completions", json={
            "model": MODEL, "prompt": "a", "max_tokens": 2, "n": LIMITS["max_choices"] + 1}),
            400, "limits.max_choices")
    FIGURES["limits"] = dict(limits)


def test_the_agents_calls_meet_the_same_limits(base_url: str) -> None:
    """A run asking for more tokens per turn than the platform allows fails at once with
    the limit named (a 400 is not retried); the run service reaches the replicas through
    a Serve handle, so the replica's methods enforce it, not its routes."""
    from tests.agents.helpers import wait_run

    with httpx.Client(base_url=base_url, headers=auth("chaos"), timeout=60) as c:
        spec = small_run("chaos", "Chaos team: keep it short.")
        spec["sampling"]["max_tokens"] = LIMITS["max_tokens"] + 1
        spec["limits"]["max_tokens"] = 4 * LIMITS["max_tokens"]
        start = c.post("/teams/chaos/runs", json={"spec": spec})
        assert start.status_code == 201, start.text
        view = wait_run(c, "chaos", start.json()["run_id"], timeout_s=120)
    assert view["status"] == "failed" and "limits.max_tokens" in view["error"], view
    assert view["turns"] == []


def test_no_api_key_is_in_the_repository() -> None:
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True,
                           check=True).stdout.decode().split("\0")
    pattern = re.compile(r"gk-[A-Za-z0-9_-]{40,}")
    found = []
    for name in filter(None, files):
        path = REPO / name
        if not path.is_file() or path.stat().st_size > 2_000_000:
            continue
        text = path.read_text(errors="replace")
        found += [name for _ in pattern.finditer(text)]
        found += [name for key in API_KEYS.values() if key in text]
    assert not found, found


def test_team_routes_refuse_before_reading_the_body(base_url: str) -> None:
    """Another team's (or a key-less) call to /teams/{team}/... is 403 (401) even with a
    malformed body: FastAPI would parse the body first and answer 422, describing the
    route; the platform's TeamGate checks the team before any body is read."""
    bad = b'{"messages": [ not json'
    for path in ("/teams/blue/v1/chat/completions", "/teams/blue/runs"):
        r = httpx.post(f"{base_url}{path}", content=bad, timeout=60,
                       headers={**auth("red"), "Content-Type": "application/json"})
        assert r.status_code == 403, (path, r.status_code, r.text)
        assert "may not use team 'blue'" in r.json()["error"]["message"]
        r = httpx.post(f"{base_url}{path}", content=bad, timeout=60,
                       headers={"Content-Type": "application/json"})
        assert r.status_code == 401, (path, r.status_code, r.text)
    # The team itself still gets the body's own error.
    r = httpx.post(f"{base_url}/teams/blue/v1/chat/completions", content=bad, timeout=60,
                   headers={**auth("blue"), "Content-Type": "application/json"})
    assert r.status_code in (400, 422), r.text
