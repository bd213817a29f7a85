"""A bounded load test on loopback against the session app: a fixed schedule of
``REQUESTS`` operations (seeded), ``WORKERS`` at a time, that stops by itself (after the
last operation, or at ``DEADLINE_S``: then the test fails). It mixes four teams and
every kind of call the platform serves:

- team-root chats (``/teams/{team}/v1/chat/completions``), plain and streamed;
- global chats and completions with the team's key, some bound to the team's own
  prefixes (``vllm_xargs.granikv_prefix_id``);
- prefix registrations (pinned or not) and deletions, while requests use them.

Every answer must be well formed: 2xx with the asked number of tokens (``ignore_eos``)
and usage, streams that end with ``[DONE]``; the only accepted error is a 404 for a
request bound to a prefix that a deletion of the schedule removed meanwhile. Afterwards
every replica is back to its idle usage: HOT used / pinned / referenced as before (no
leaked slot or pin), COLD used as before, nothing running or waiting, no bind error.
The counts are written to the figures file.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from tests.conftest import auth, counters, stats, wait_until
from tests.reliability.figures import record
from tests.reliability.test_fuzz_api import live_replicas

pytestmark = [pytest.mark.ray, pytest.mark.vllm]
MODEL = "tiny-llama"
TEAMS = ("red", "blue", "gold", "green")
REQUESTS = 240
WORKERS = 8
DEADLINE_S = 240.0
SEED = 20261129
MAX_LIVE_PREFIXES = 3  # per team, so that the HOT arena never has to evict


@dataclass(frozen=True)
class Op:
    kind: str
    team: str
    n: int  # its index in the schedule (prompts and prefix ids differ per op)
    max_tokens: int


def schedule() -> list[Op]:
    rng = random.Random(SEED)
    kinds = (["team_chat"] * 30 + ["team_stream"] * 15 + ["bound_completion"] * 15 +
             ["global_chat"] * 10 + ["completion_stream"] * 10 + ["register"] * 12 +
             ["delete"] * 8)
    return [Op(rng.choice(kinds), rng.choice(TEAMS), i, rng.choice((1, 4, 8, 16)))
            for i in range(REQUESTS)]


def prefix_tokens(team: str, k: int) -> list[int]:
    rng = random.Random(f"{team}-{k}")
    return [rng.randrange(10, 1000) for _ in range(rng.choice((32, 96, 192, 256)))]


class Prefixes:
    """The load's own prefixes per team: registered, live, deleted (thread-safe)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.live: dict[str, list[str]] = {t: [] for t in TEAMS}
        self.deleted: set[str] = set()
        self.made = 0

    def new_id(self, team: str) -> str | None:
        with self.lock:
            if len(self.live[team]) >= MAX_LIVE_PREFIXES:
                return None
            self.made += 1
            return f"load-{team}-{self.made}"

    def add(self, team: str, pid: str) -> None:
        with self.lock:
            self.live[team].append(pid)

    def pick(self, team: str, rng: random.Random) -> str | None:
        with self.lock:
            return rng.choice(self.live[team]) if self.live[team] else None

    def take(self, team: str, rng: random.Random) -> str | None:
        with self.lock:
            if not self.live[team]:
                return None
            pid = self.live[team].pop(rng.randrange(len(self.live[team])))
            self.deleted.add(pid)
            return pid


def check_completion(r: httpx.Response, op: Op, chat: bool) -> None:
    assert r.status_code == 200, (op, r.status_code, r.text[:300])
    body = r.json()
    choice = body["choices"][0]
    text = choice["message"]["content"] if chat else choice["text"]
    assert isinstance(text, str) and body["usage"]["completion_tokens"] == op.max_tokens, body
    assert body["usage"]["prompt_tokens"] > 0 and choice["finish_reason"] == "length", body


def check_stream(s: httpx.Response, op: Op) -> int:
    assert s.status_code == 200, (op, s.status_code)
    data = [line[6:] for line in s.iter_lines() if line.startswith("data: ")]
    assert data and data[-1] == "[DONE]", (op, data[-3:])
    chunks = [json.loads(d) for d in data[:-1]]
    assert all("error" not in c for c in chunks), (op, chunks[-1])
    assert sum(1 for c in chunks for ch in c["choices"] if ch.get("finish_reason")) == 1
    return len(chunks)


def run_op(c: httpx.Client, op: Op, prefixes: Prefixes) -> str:
    """One operation; returns how it was answered (its label in the figures)."""
    rng = random.Random(SEED + op.n)
    msg = [{"role": "user", "content": f"load {op.n}: {op.kind} for {op.team}"}]
    gen = {"model": MODEL, "max_tokens": op.max_tokens, "ignore_eos": True,
           "temperature": rng.choice((0.0, 0.7)), "seed": op.n}
    if op.kind == "team_chat":
        check_completion(c.post(f"/teams/{op.team}/v1/chat/completions",
                                json={**gen, "messages": msg}), op, chat=True)
    elif op.kind == "team_stream":
        with c.stream("POST", f"/teams/{op.team}/v1/chat/completions",
                      json={**gen, "messages": msg, "stream": True}) as s:
            check_stream(s, op)
    elif op.kind == "global_chat":
        check_completion(c.post("/v1/chat/completions", json={**gen, "messages": msg}), op,
                         chat=True)
    elif op.kind in ("bound_completion", "completion_stream"):
        pid = prefixes.pick(op.team, rng)
        prompt = [*prefix_tokens(op.team, int(pid.rsplit("-", 1)[1])), 5, op.n % 900 + 10] \
            if pid else [1, 2, 3, op.n % 900 + 10]
        body: dict[str, Any] = {**gen, "prompt": prompt}
        if pid:
            body["vllm_xargs"] = {"granikv_prefix_id": pid}
        if op.kind == "bound_completion":
            r = c.post("/v1/completions", json=body)
            if r.status_code == 404 and pid in prefixes.deleted:
                assert r.json()["error"]["code"] == 404
                return "bound_to_a_deleted_prefix_404"
            check_completion(r, op, chat=False)
            return "bound_completion" if pid else "completion"
        with c.stream("POST", "/v1/completions", json={**body, "stream": True}) as s:
            if s.status_code == 404 and pid in prefixes.deleted:
                s.read()
                return "bound_to_a_deleted_prefix_404"
            check_stream(s, op)
        return "bound_stream" if pid else "completion_stream"
    elif op.kind == "register":
        pid = prefixes.new_id(op.team)
        if pid is None:
            return "register_skipped_at_cap"
        r = c.post("/v1/prefixes", json={"token_ids": prefix_tokens(op.team, int(
            pid.rsplit("-", 1)[1])), "prefix_id": pid, "pin": rng.random() < 0.7})
        assert r.status_code == 201 and r.json()["team"] == op.team, r.text
        prefixes.add(op.team, pid)
    elif op.kind == "delete":
        pid = prefixes.take(op.team, rng)
        if pid is None:
            return "delete_skipped_none_live"
        r = c.delete(f"/v1/prefixes/{pid}")
        assert r.status_code == 200 and r.json()["deleted"] is True, r.text
    return op.kind


def idle(s: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r: {"hot_used": rep["granikv"]["hot"]["used"],
                "hot_pinned": rep["granikv"]["hot"]["pinned"],
                "hot_referenced": rep["granikv"]["hot"]["referenced"],
                "hot_entries": rep["granikv"]["hot"]["entries"],
                "cold_used": rep["granikv"]["cold"]["used"],
                "running": rep["frontend"]["running"], "waiting": rep["frontend"]["waiting"],
                "inflight": rep["inflight"]}
            for r, rep in s["replicas"].items()}


def serve_replica_ids() -> set[str]:
    """The LLM and other replicas Serve runs now (their actors), by replica id."""
    return {name.rsplit("#", 1)[1] for name in live_replicas()}


def quiet(url: str, ids: set[str]) -> dict[str, Any]:
    """Stats in which every replica of ``ids`` reported after this call, all at the same
    registry version (every change made before the call applied), with nothing in use.
    A replica's report can be late (the stats list a replica only while its last report
    is recent, see docs/reliability.md) or never come (Serve replaced it): the first is
    waited for, the second named."""
    now = time.time()
    seen = {r: rep["reported_at"] for r, rep in stats(url)["replicas"].items()}

    def ok() -> dict[str, Any] | None:
        s = stats(url)
        reps = s["replicas"]
        if not ids <= set(reps) or any(reps[r]["reported_at"] <= seen.get(r, now)
                                       for r in ids):
            return None
        if len({reps[r]["registry_version"] for r in ids}) != 1:
            return None  # one replica has not reconciled yet
        busy = any(v["running"] or v["waiting"] or v["inflight"] or v["hot_referenced"]
                   for r, v in idle(s).items() if r in ids)
        return None if busy else s

    try:
        return wait_until(ok, 120, "idle replicas", every_s=0.5)  # type: ignore[no-any-return]
    except AssertionError:
        gone = ids - serve_replica_ids()
        if gone:
            raise AssertionError(f"Serve replaced replica(s) {sorted(gone)} during the load; "
                                 "the Ray logs of this test session are kept (tests/conftest.py)"
                                 ) from None
        raise AssertionError(f"replicas {sorted(ids)} did not report idle within 120 s: "
                             f"{idle(stats(url))}") from None


def two_replicas(url: str) -> set[str]:
    """The ids of the app's two LLM replicas, once both report."""
    def both() -> set[str] | None:
        ids = set(stats(url)["replicas"])
        return ids if len(ids) == 2 else None

    return wait_until(both, 120, "two live replicas", every_s=0.5)  # type: ignore[no-any-return]


def test_bounded_mixed_load_leaks_nothing(base_url: str) -> None:
    ids = two_replicas(base_url)
    before = quiet(base_url, ids)
    ops = schedule()
    prefixes = Prefixes()
    answers: Counter[str] = Counter()
    failures: list[str] = []
    deadline = time.monotonic() + DEADLINE_S
    t0 = time.monotonic()
    clients = {t: httpx.Client(base_url=base_url, headers=auth(t), timeout=120) for t in TEAMS}

    def work(op: Op) -> None:
        if time.monotonic() > deadline:
            answers["not_started_deadline"] += 1
            return
        try:
            answers[run_op(clients[op.team], op, prefixes)] += 1
        except (AssertionError, httpx.HTTPError, KeyError, ValueError) as e:
            failures.append(f"{op}: {type(e).__name__}: {e}"[:600])

    try:
        with ThreadPoolExecutor(WORKERS) as pool:
            list(pool.map(work, ops))
        elapsed = time.monotonic() - t0
        for team, c in clients.items():  # what is left of the load's prefixes
            for pid in list(prefixes.live[team]):
                assert c.delete(f"/v1/prefixes/{pid}").status_code == 200
            left = [p["prefix_id"] for p in c.get("/v1/prefixes").json()["data"]]
            assert not [p for p in left if p.startswith("load-")], left
    finally:
        for c in clients.values():
            c.close()
    try:  # the same replicas, each with a report made after the load
        after = quiet(base_url, ids)
    except AssertionError as e:  # with what the load saw, which may tell why
        raise AssertionError(f"{e}\n{len(failures)} operations failed:\n" +
                             "\n".join(failures[:10])) from None
    served = sum(n for k, n in answers.items() if "skipped" not in k and "not_started" not in k)
    b = {r: v for r, v in idle(before).items() if r in ids}
    a = {r: v for r, v in idle(after).items() if r in ids}
    leaks = {r: {k: a[r][k] - b[r][k] for k in ("hot_used", "hot_pinned", "hot_entries",
                                                "cold_used")} for r in ids}
    evictions = sum(after["replicas"][r]["granikv"]["evictions"] -
                    before["replicas"][r]["granikv"]["evictions"] for r in ids)
    bind_errors = sum(counters(after["replicas"][r])["bind_errors"] -
                      counters(before["replicas"][r])["bind_errors"] for r in ids)
    record("load", operations=len(ops), workers=WORKERS, seed=SEED, seconds=round(elapsed, 1),
           deadline_s=DEADLINE_S, answered=dict(sorted(answers.items())), served=served,
           malformed_or_failed=len(failures), prefixes_registered=prefixes.made,
           prefixes_deleted_during_load=len(prefixes.deleted), hot_evictions=evictions,
           bind_errors=bind_errors, leaked=leaks, idle_before=b, idle_after=a)
    assert not failures, "\n".join(failures[:10])
    assert answers["not_started_deadline"] == 0 and elapsed < DEADLINE_S, (elapsed, answers)
    assert evictions == 0 and bind_errors == 0, (evictions, bind_errors)
    for r in b:
        assert leaks[r] == {"hot_used": 0, "hot_pinned": 0, "hot_entries": 0,
                            "cold_used": 0}, (r, leaks[r], b[r], a[r])
        assert a[r]["hot_referenced"] == a[r]["running"] == a[r]["waiting"] == 0, a[r]
