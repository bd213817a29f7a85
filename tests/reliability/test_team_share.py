"""One team saturates its share of the replicas; another team's small chats must still
answer within ``TARGET_P99_S`` at the 99th percentile (limits.team_max_sequences and
team_max_queued at their defaults: half the engine's max_num_seqs, 32 waiting).

The heavy team (red) sends completions at the session app's limits (``n`` = max_choices,
``max_tokens`` = its limit, ``ignore_eos``), streamed and not, and opens streams it never
reads (raw sockets with a small receive buffer), far more at once than its share and
queue hold. Meanwhile the light team (blue) sends 2-token team chats one after another.
Each of red's answers must be a 200, or a 429 with Retry-After that names the limit
(a 400 naming limits.team_max_sequences for a prompt batch larger than a whole share);
afterwards no replica holds any share. The growing case draws red's request shapes from
a seed (chats, completions, prompt batches, streams read, dropped after their first
chunk, or never read) at rising concurrency. The light team's latencies (idle, and under
each load) and the worst delay red caused it go to the figures file.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import socket
import statistics
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from tests.conftest import LIMITS, auth, stats, wait_until
from tests.reliability.figures import record

pytestmark = [pytest.mark.ray, pytest.mark.vllm]
MODEL = "tiny-llama"
HEAVY, LIGHT = "red", "blue"
TARGET_P99_S = 2.0
PROBES = 40
REFUSED_PAUSE_S = 0.2  # a heavy worker's pause after a refusal
SEED = 20261212
LEVELS = (16, 48, 112)  # the growing case: red's requests in flight at once
LIGHT_CHAT = {"model": MODEL, "max_tokens": 2, "ignore_eos": True,
              "messages": [{"role": "user", "content": "status?"}]}
FULL = {"model": MODEL, "prompt": "review this change " * 8, "n": LIMITS["max_choices"],
        "max_tokens": LIMITS["max_tokens"], "ignore_eos": True}


@dataclass
class Outcomes:
    """Red's answers by kind, and what was wrong with any of them."""

    seen: Counter[str] = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, label: str, problem: str | None = None) -> None:
        with self.lock:
            self.seen[label] += 1
            if problem is not None and len(self.problems) < 20:
                self.problems.append(problem)


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)]


def refusal_problem(status: int, headers: httpx.Headers, text: str) -> str | None:
    """None when a refusal is well formed: a 429 with Retry-After that names the limit,
    OpenAI-shaped; or a 400 for a request larger than a whole share."""
    try:
        err = json.loads(text)["error"]
    except (ValueError, KeyError, TypeError):
        return f"{status}: not an OpenAI error body: {text[:200]!r}"
    if status == 429:
        if headers.get("retry-after") != "1" or err.get("type") != "RateLimitError" \
                or "limits.team_max_queued" not in err.get("message", ""):
            return f"429 without Retry-After or the limit: {dict(headers)} {err}"
        return None
    if status == 400 and "limits.team_max_sequences" in err.get("message", ""):
        return None
    return f"{status}: {err}"


def shape(rng: random.Random) -> tuple[str, dict[str, Any]]:
    """One of red's requests: (how it is sent, its body), drawn from ``rng``."""
    kind = rng.choice(("completion", "chat", "stream", "dropped", "unread", "batch"))
    n = rng.choice((1, LIMITS["max_choices"]))
    max_tokens = rng.choice((1, 16, LIMITS["max_tokens"], LIMITS["max_tokens"]))
    if kind == "chat":
        return kind, {"model": MODEL, "n": n, "max_tokens": max_tokens, "ignore_eos": True,
                      "messages": [{"role": "user", "content": "go on " * rng.randrange(1, 30)}]}
    body = {**FULL, "n": n, "max_tokens": max_tokens}
    if kind == "batch":
        body["prompt"] = ["b" * rng.randrange(1, 40) for _ in range(rng.randrange(2, 12))]
    if kind in ("stream", "dropped", "unread"):
        body["stream"] = True
    return kind, body


def at_the_limits(rng: random.Random) -> tuple[str, dict[str, Any]]:
    """Red's requests of the plain case: all at the limits, a quarter of them unread."""
    kind = rng.choice(("completion", "stream", "stream", "unread"))
    return kind, {**FULL, "stream": True} if kind != "completion" else FULL


def path_of(body: dict[str, Any]) -> str:
    return "/v1/chat/completions" if "messages" in body else "/v1/completions"


def open_unread(port: int, team: str, body: dict[str, Any]) -> socket.socket:
    """A stream its client never reads: the request is sent, nothing is received."""
    data = json.dumps(body).encode()
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", port))
    head = (f"POST {path_of(body)} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Authorization: {auth(team)['Authorization']}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n")
    s.sendall(head.encode() + data)
    return s


class HeavyTeam:
    """Red's load, ``concurrency`` requests at a time, in its own thread and loop,
    until ``stop()``; each worker sends ``pick(rng)`` again as soon as one ends."""

    def __init__(self, base_url: str, concurrency: int, seed: int,
                 pick: Any = None, unread_hold_s: float = 8.0) -> None:
        self.base_url = base_url
        self.port = int(base_url.rsplit(":", 1)[1])
        self.concurrency = concurrency
        self.seed = seed
        self.pick = pick or (lambda rng: ("completion", FULL))
        self.unread_hold_s = unread_hold_s
        self.outcomes = Outcomes()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)

    def __enter__(self) -> HeavyTeam:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=180)
        assert not self._thread.is_alive(), "the heavy team's load did not stop"

    async def _main(self) -> None:
        limits = httpx.Limits(max_connections=self.concurrency + 8)
        async with httpx.AsyncClient(base_url=self.base_url, headers=auth(HEAVY),
                                     timeout=300, limits=limits) as c:
            await asyncio.gather(*(self._worker(c, random.Random(self.seed * 1000 + i))
                                   for i in range(self.concurrency)))

    async def _worker(self, c: httpx.AsyncClient, rng: random.Random) -> None:
        while not self._stop.is_set():
            kind, body = self.pick(rng)
            try:
                refused = await self._send(c, kind, body)
            except httpx.HTTPError as e:
                self.outcomes.add("transport", f"{kind}: {type(e).__name__}: {e}")
                refused = True
            if refused:  # sooner than its Retry-After: pressure, not a request flood
                await asyncio.sleep(REFUSED_PAUSE_S)

    async def _send(self, c: httpx.AsyncClient, kind: str, body: dict[str, Any]) -> bool:
        """Whether it was refused."""
        if kind == "unread":
            s = await asyncio.to_thread(open_unread, self.port, HEAVY, body)
            try:  # held unread, then dropped
                await asyncio.sleep(self.unread_hold_s)
            finally:
                s.close()
            self.outcomes.add("unread")
            return False
        if not body.get("stream"):
            r = await c.post(path_of(body), json=body)
            return self._answered(kind, r.status_code, r.headers, r.text)
        async with c.stream("POST", path_of(body), json=body) as r:
            if r.status_code != 200:
                return self._answered(kind, r.status_code, r.headers,
                                      (await r.aread()).decode())
            async for line in r.aiter_lines():
                if kind == "dropped" and line.startswith("data: "):
                    break  # the client goes away after the first chunk
            self.outcomes.add(kind)
            return False

    def _answered(self, kind: str, status: int, headers: httpx.Headers, text: str) -> bool:
        if status == 200:
            self.outcomes.add(kind)
            return False
        self.outcomes.add(str(status), refusal_problem(status, headers, text))
        return True


def light_latencies(base_url: str, count: int) -> list[float]:
    """``count`` 2-token team chats of the light team, one after another (seconds)."""
    took: list[float] = []
    with httpx.Client(base_url=base_url, headers=auth(LIGHT), timeout=300) as c:
        for _ in range(count):
            t0 = time.perf_counter()
            r = c.post(f"/teams/{LIGHT}/v1/chat/completions", json=LIGHT_CHAT)
            took.append(time.perf_counter() - t0)
            assert r.status_code == 200, r.text
            time.sleep(0.05)
    return took


def shares(base_url: str) -> dict[str, dict[str, dict[str, int]]]:
    return {r: rep.get("team_share", {}) for r, rep in stats(base_url)["replicas"].items()}


def saturated(base_url: str) -> bool:
    """Red has requests waiting for its share, or (were there no share) the engine's
    batch is full and requests wait for it."""
    return any(rep.get("team_share", {}).get(HEAVY, {}).get("queued", 0) > 0
               or rep["frontend"]["waiting"] > 0
               for rep in stats(base_url)["replicas"].values())


def no_share_held(base_url: str) -> bool:
    return all(not s for s in shares(base_url).values())


def summary(took: list[float]) -> dict[str, float]:
    return {"p50_s": round(statistics.median(took), 3), "p99_s": round(p99(took), 3),
            "max_s": round(max(took), 3), "count": len(took)}


def test_one_team_at_its_share_leaves_room_for_another(base_url: str) -> None:
    wait_until(lambda: no_share_held(base_url), 60, "no share held before the load")
    idle = light_latencies(base_url, 10)
    with HeavyTeam(base_url, concurrency=96, seed=SEED, pick=at_the_limits) as heavy:
        full = wait_until(lambda: saturated(base_url), 60, "red saturating")
        loaded = light_latencies(base_url, PROBES)
    wait_until(lambda: no_share_held(base_url), 120, "every share given back")
    worst = max(loaded) - statistics.median(idle)
    record("team_share", idle=summary(idle), loaded=summary(loaded),
           worst_delay_s=round(worst, 3), heavy=dict(heavy.outcomes.seen),
           heavy_concurrency=96, target_p99_s=TARGET_P99_S)
    assert not heavy.outcomes.problems, heavy.outcomes.problems
    assert p99(loaded) < TARGET_P99_S, (summary(idle), summary(loaded))
    assert full and heavy.outcomes.seen["429"] > 0, heavy.outcomes.seen


def test_growing_saturation_fuzz(base_url: str) -> None:
    """Red's request shapes drawn from a seed, at rising concurrency; at every level
    blue's p99 stays under the target and red's answers are 200s or well-formed
    refusals; no share is left held."""
    levels: dict[str, Any] = {}
    seen: Counter[str] = Counter()
    for level in LEVELS:
        wait_until(lambda: no_share_held(base_url), 120, "no share held between levels")
        with HeavyTeam(base_url, concurrency=level, seed=SEED + level, pick=shape,
                       unread_hold_s=4.0) as heavy:
            time.sleep(3.0)  # the load builds up
            loaded = light_latencies(base_url, PROBES // 2)
        levels[str(level)] = {**summary(loaded), "heavy": dict(heavy.outcomes.seen)}
        seen.update(heavy.outcomes.seen)
        assert not heavy.outcomes.problems, (level, heavy.outcomes.problems)
        assert p99(loaded) < TARGET_P99_S, (level, summary(loaded))
    wait_until(lambda: no_share_held(base_url), 120, "every share given back")
    record("team_share_growing", levels=levels, seed=SEED, heavy=dict(seen),
           target_p99_s=TARGET_P99_S)
