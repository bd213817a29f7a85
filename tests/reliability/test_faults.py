"""Faults on the real Serve app (the session app of tests/conftest.py), team ``chaos``.

- HOT budget exhausted: pinned prefixes fill the team's HOT budget until the registry
  refuses one (409); the same prefix registered unpinned fits on no replica (COLD);
  requests bound to it are served from COLD, with the same greedy answer as the same
  prompt unbound, and requests bound to a prefix that did fit still hit HOT. Deleting
  the prefixes gives every slot back.
- Unpin and delete during use: requests are streaming from a prefix when it is unpinned
  and then deleted; its slots are freed only when the last of them finishes (deferred
  free), another prefix registered meanwhile does not take them, and every stream's
  greedy answer equals the one computed before (no corruption).

(A replica killed during a team run: test_replica_kill.py, last in this folder.)
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from tests.conftest import LIMITS, auth, counters, fresh_stats, stats, wait_until
from tests.reliability.figures import record

pytestmark = [pytest.mark.ray, pytest.mark.vllm]
MODEL = "tiny-llama"
PLEN = LIMITS["max_prefix_tokens"] - 36  # each filler prefix: 1500 tokens


def tokens(seed: int, n: int) -> list[int]:
    return [(seed * 7919 + 31 * j) % 1000 + 10 for j in range(n)]


def hot(s: dict[str, Any]) -> dict[str, dict[str, int]]:
    return {r: rep["granikv"]["hot"] for r, rep in s["replicas"].items()}


def states(s: dict[str, Any], pid: str) -> set[str]:
    """The prefix's state on every replica (missing: not there yet)."""
    return {rep["prefix_hits"].get(pid, {}).get("state", "missing")
            for rep in s["replicas"].values()}


def complete(c: httpx.Client, prompt: list[int], pid: str | None = None,
             max_tokens: int = 16) -> dict[str, Any]:
    body: dict[str, Any] = {"model": MODEL, "prompt": prompt, "max_tokens": max_tokens,
                            "temperature": 0, "ignore_eos": True}
    if pid is not None:
        body["vllm_xargs"] = {"granikv_prefix_id": pid}
    r = c.post("/v1/completions", json=body)
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    assert out["usage"]["completion_tokens"] == max_tokens
    return out


def sum_counters(s: dict[str, Any]) -> dict[str, int]:
    out: dict[str, int] = {}
    for rep in s["replicas"].values():
        for k, v in counters(rep).items():
            out[k] = out.get(k, 0) + v
    return out


def delete_all(c: httpx.Client) -> int:
    ids = [p["prefix_id"] for p in c.get("/v1/prefixes").json()["data"]]
    for pid in ids:
        assert c.delete(f"/v1/prefixes/{pid}").status_code == 200
    return len(ids)


def settle(url: str, pred: Callable[[dict[str, Any]], bool], what: str,
           timeout_s: float = 60) -> dict[str, Any]:
    """The first stats (every replica's latest report) that satisfy ``pred``."""
    def ok() -> dict[str, Any] | None:
        s = stats(url)
        return s if pred(s) else None

    return wait_until(ok, timeout_s, what, every_s=0.5)  # type: ignore[no-any-return]


def without_chaos(url: str) -> dict[str, Any]:
    """Stats once no replica holds a prefix of team chaos and nothing is referenced."""
    return settle(url, lambda s: all(
        h["referenced"] == 0 for h in hot(s).values()) and not any(
        p["team"] == "chaos" for rep in s["replicas"].values()
        for p in rep["prefix_hits"].values()), "no chaos prefix on any replica")


def test_exhausted_hot_budget_serves_from_cold(base_url: str) -> None:
    c = httpx.Client(base_url=base_url, headers=auth("chaos"), timeout=120)
    delete_all(c)
    before = without_chaos(base_url)
    cap = min(h["capacity"] for h in hot(before).values())
    placed: list[str] = []
    overflow = None
    for i in range(cap // PLEN + 4):  # more than the whole arena
        pid = f"chaos-fill-{i}"
        r = c.post("/v1/prefixes", json={"token_ids": tokens(i, PLEN), "prefix_id": pid})
        if r.status_code == 409:  # past the team's HOT budget: registered unpinned
            assert "HOT budget" in r.json()["error"]["message"], r.text
            r = c.post("/v1/prefixes", json={"token_ids": tokens(i, PLEN),
                                             "prefix_id": pid, "pin": False})
        assert r.status_code == 201, r.text
        s = settle(base_url, lambda s, pid=pid: "missing" not in states(s, pid),  # type: ignore[misc]
                   f"{pid} on every replica", 30)
        if states(s, pid) == {"cold"}:  # fits on no replica
            overflow = pid
            break
        placed.append(pid)
    assert overflow is not None, "the budget never filled"
    full = stats(base_url)
    for rep in full["replicas"].values():  # nothing more of chaos fits
        team = rep["granikv"]["teams"]["chaos"]
        assert team["used"] + PLEN > team["budget"], team
    ready = next(p for p in placed if states(full, p) == {"ready"})

    suffix = [77, 78, 79, 80]
    cold_prompt, ready_prompt = tokens(len(placed), PLEN) + suffix, tokens(0, PLEN) + suffix
    reference = {"cold": complete(c, cold_prompt), "ready": complete(c, ready_prompt)}
    # A report newer than one fetched after the reference requests (a report newer
    # than `full` could predate their counts: one unbound prompt matches a READY prefix)
    base = sum_counters(fresh_stats(base_url, stats(base_url)))
    n = 6
    with ThreadPoolExecutor(n) as pool:
        cold = list(pool.map(lambda _: complete(c, cold_prompt, overflow), range(n)))
    mid = fresh_stats(base_url, stats(base_url))
    d_cold = {k: v - base[k] for k, v in sum_counters(mid).items()}
    with ThreadPoolExecutor(n) as pool:
        warm = list(pool.map(lambda _: complete(c, ready_prompt, ready), range(n)))
    # reports made after the requests ended (one newer than `mid` may predate them)
    d_hot = {k: v - sum_counters(mid)[k]
             for k, v in sum_counters(fresh_stats(base_url, stats(base_url))).items()}
    assert all(o["choices"][0]["text"] == reference["cold"]["choices"][0]["text"]
               for o in cold), "COLD answers differ from the unbound ones"
    assert all(o["choices"][0]["text"] == reference["ready"]["choices"][0]["text"]
               for o in warm), "HOT answers differ from the unbound ones"
    assert d_cold["bound_requests"] == n and d_cold["cold_fallbacks"] == n, d_cold
    assert d_cold["hits"] == 0 and d_cold["bind_errors"] == 0, d_cold
    assert d_hot["bound_requests"] == n and d_hot["hits"] == n, d_hot
    assert d_hot["cold_fallbacks"] == 0 and d_hot["bind_errors"] == 0, d_hot

    deleted = delete_all(c)
    after = without_chaos(base_url)
    for r, h in hot(after).items():  # unpinned prefixes evicted meanwhile may be gone
        assert h["used"] <= hot(before)[r]["used"] and h["pinned"] == hot(before)[r]["pinned"]
        assert h["entries"] <= hot(before)[r]["entries"], (h, hot(before)[r])
    c.close()
    record("fault_hot_exhausted", prefixes_registered=len(placed) + 1,
           prefix_tokens=PLEN, hot_capacity=cap, team_budget={
               r: rep["granikv"]["teams"]["chaos"]["budget"]
               for r, rep in full["replicas"].items()}, requests_served_from_cold=n,
           requests_served_from_hot=n, deleted=deleted,
           hot_after={r: {k: h[k] for k in ("used", "pinned", "referenced")}
                      for r, h in hot(after).items()},
           hot_before={r: {k: h[k] for k in ("used", "pinned", "referenced")}
                       for r, h in hot(before).items()})


def test_unpin_and_delete_during_use_defer_the_free(base_url: str) -> None:
    c = httpx.Client(base_url=base_url, headers=auth("chaos"), timeout=120)
    delete_all(c)
    before = without_chaos(base_url)
    pid, plen = "chaos-inuse", 1200
    prefix = tokens(4242, plen)
    assert c.post("/v1/prefixes", json={"token_ids": prefix, "prefix_id": pid}).status_code == 201
    settle(base_url, lambda s: states(s, pid) == {"ready"}, "the prefix on both replicas")
    n, max_tokens = 6, LIMITS["max_tokens"]
    prompts = [prefix + [90 + i, 91 + i] for i in range(n)]
    reference = [complete(c, p, max_tokens=max_tokens)["choices"][0]["text"] for p in prompts]

    started = threading.Barrier(n + 1, timeout=120)
    finished_at: list[float] = []

    def stream(i: int) -> str:
        body = {"model": MODEL, "prompt": prompts[i], "max_tokens": max_tokens,
                "temperature": 0, "ignore_eos": True, "stream": True,
                "vllm_xargs": {"granikv_prefix_id": pid}}
        text, first = [], True
        with httpx.Client(base_url=base_url, headers=auth("chaos"), timeout=120) as sc, \
                sc.stream("POST", "/v1/completions", json=body) as s:
            assert s.status_code == 200
            for line in s.iter_lines():
                if not line.startswith("data: {"):
                    continue
                text.append(json.loads(line[6:])["choices"][0]["text"])
                if first:
                    first = False
                    started.wait()  # every stream is decoding from the prefix
        finished_at.append(time.monotonic())
        return "".join(text)

    with ThreadPoolExecutor(n) as pool:
        futures = [pool.submit(stream, i) for i in range(n)]
        started.wait()
        t_unpin = time.monotonic()
        r = c.post("/v1/prefixes", json={"token_ids": prefix, "prefix_id": pid, "pin": False})
        assert r.status_code == 200 and r.json()["pinned"] is False, r.text
        assert c.delete(f"/v1/prefixes/{pid}").status_code == 200
        t_deleted = time.monotonic()
        assert c.get(f"/v1/prefixes/{pid}").status_code == 404
        # replicas report every sync period: a report made after the delete, not one
        # from before the streams took their HOT reference
        during = fresh_stats(base_url, stats(base_url))
        # A new prefix of the same size while the old one's slots are still read.
        other = tokens(999, plen)
        assert c.post("/v1/prefixes", json={"token_ids": other,
                                            "prefix_id": "chaos-next"}).status_code == 201
        complete(c, other + [5, 6], "chaos-next", max_tokens=4)  # its fill wrote HOT
        t_next = time.monotonic()
        texts = [f.result() for f in futures]
    in_flight_at_delete = sum(1 for t in finished_at if t > t_deleted)
    in_flight_after_next = sum(1 for t in finished_at if t > t_next)
    # Had the delete freed the slots at once, the next prefix (same size, first fit) would
    # have been written over them while these streams still read them.
    assert in_flight_at_delete > 0, "the streams ended before the delete: nothing deferred"
    assert texts == reference, "a stream read corrupted K/V"
    assert any(h["referenced"] >= plen for h in hot(during).values()), hot(during)

    deleted = delete_all(c)
    after = without_chaos(base_url)
    for r, h in hot(after).items():  # every slot of both prefixes is back
        assert (h["used"], h["pinned"], h["entries"]) == (
            hot(before)[r]["used"], hot(before)[r]["pinned"], hot(before)[r]["entries"]), r
    c.close()
    record("fault_unpin_delete_in_use", streams=n, tokens_per_stream=max_tokens,
           streams_in_flight_at_delete=in_flight_at_delete,
           streams_in_flight_after_next_fill=in_flight_after_next,
           delete_after_first_token_s=round(t_deleted - t_unpin, 3),
           streams_equal_to_reference=sum(t == r for t, r in zip(texts, reference)),
           prefix_tokens=plen, deleted_after=deleted,
           hot_after={r: {k: h[k] for k in ("used", "pinned", "referenced")}
                      for r, h in hot(after).items()})
