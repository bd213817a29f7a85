"""A soak (``make soak``; not in CI): test_load.py's mix of operations for
``GRANIKV_SOAK_S`` seconds (default 600) with ``GRANIKV_SOAK_WORKERS`` at a time
(default 4, what two CPU replicas on a 2-core machine hold), while one LLM replica is
killed every ``GRANIKV_SOAK_KILL_EVERY_S`` seconds (default 120; Serve starts a new one).

Counted: operations, how each was answered, latency percentiles, errors. A request in
flight on a killed replica may fail with 503 (also inline, ending a stream) or a cut
connection: those are counted as ``lost_to_a_kill``; any other error fails the soak. Afterwards,
once both replicas report (the new ones re-pin the registry's prefixes), every replica
holds exactly what a replica held before the soak: HOT used / pinned / entries, COLD
used 0, nothing referenced. Leaked slots and pins must be 0. The figures go to the
figures file (section ``soak``).
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from tests.conftest import auth, stats
from tests.reliability.figures import record
from tests.reliability.test_load import (
    SEED,
    TEAMS,
    Op,
    Prefixes,
    idle,
    quiet,
    run_op,
    schedule,
    two_replicas,
)
from tests.reliability.test_replica_kill import kill_replica

pytestmark = [pytest.mark.ray, pytest.mark.vllm]
SOAK_S = float(os.environ.get("GRANIKV_SOAK_S", "600"))
WORKERS = int(os.environ.get("GRANIKV_SOAK_WORKERS", "4"))
KILL_EVERY_S = float(os.environ.get("GRANIKV_SOAK_KILL_EVERY_S", "120"))
USAGE = ("hot_used", "hot_pinned", "hot_entries", "cold_used")


def transient(e: Exception) -> bool:
    """A failure a kill explains: 503, a stream ended by an inline error, a cut
    connection."""
    return isinstance(e, httpx.TransportError) or "503" in str(e)


def test_soak(base_url: str) -> None:
    ids = two_replicas(base_url)
    before = idle(quiet(base_url, ids))
    rest = {k: before[next(iter(ids))][k] for k in USAGE}
    assert all({k: v[k] for k in USAGE} == rest for v in before.values()), before
    prefixes = Prefixes()
    answers: Counter[str] = Counter()
    latencies: list[float] = []
    failures: list[str] = []
    kills: list[dict[str, Any]] = []
    lock = threading.Lock()
    stop = time.monotonic() + SOAK_S
    clients = {t: httpx.Client(base_url=base_url, headers=auth(t), timeout=120) for t in TEAMS}
    ops = schedule()
    counter = iter(range(10**9))

    def worker() -> None:
        while time.monotonic() < stop:
            with lock:
                n = next(counter)
            base = ops[n % len(ops)]
            op = Op(base.kind, base.team, n, base.max_tokens)
            t0 = time.monotonic()
            try:
                label = run_op(clients[op.team], op, prefixes)
            except (AssertionError, httpx.HTTPError, KeyError, ValueError) as e:
                label = "lost_to_a_kill" if transient(e) else "failed"
                if label == "failed":
                    failures.append(f"{op}: {type(e).__name__}: {e}"[:600])
            with lock:
                answers[label] += 1
                latencies.append(time.monotonic() - t0)

    def killer() -> None:
        rng = random.Random(SEED)
        while time.monotonic() + KILL_EVERY_S < stop:
            time.sleep(KILL_EVERY_S)
            live = sorted(stats(base_url)["replicas"])
            if live:
                victim = rng.choice(live)
                kill_replica("llm", victim)
                kills.append({"at_s": round(SOAK_S - (stop - time.monotonic()), 1),
                              "replica": victim})

    t_start = time.monotonic()
    try:
        with ThreadPoolExecutor(WORKERS + 1) as pool:
            runs = [pool.submit(worker) for _ in range(WORKERS)] + [pool.submit(killer)]
            for f in runs:
                f.result()
        elapsed = time.monotonic() - t_start
        for c in clients.values():  # the load's prefixes, also those a kill cut short
            for p in c.get("/v1/prefixes").json()["data"]:
                if p["prefix_id"].startswith("load-"):
                    assert c.delete(f"/v1/prefixes/{p['prefix_id']}").status_code in (200, 404)
    finally:
        for c in clients.values():
            c.close()
    now = two_replicas(base_url)
    after = idle(quiet(base_url, now))
    leaks = {r: {k: after[r][k] - rest[k] for k in USAGE} for r in now}
    lat = sorted(latencies)

    def pct(p: float) -> float:
        return round(lat[min(len(lat) - 1, int(p * len(lat)))], 3) if lat else 0.0

    record("soak", seconds=round(elapsed, 1), workers=WORKERS, kill_every_s=KILL_EVERY_S,
           kills=kills, operations=sum(answers.values()), answered=dict(sorted(answers.items())),
           failed=len(failures), lost_to_a_kill=answers["lost_to_a_kill"],
           latency_s={"p50": pct(0.5), "p90": pct(0.9), "p99": pct(0.99), "max": pct(1.0)},
           prefixes_registered=prefixes.made, replicas_after=sorted(now), leaked=leaks,
           idle_before=before, idle_after=after)
    assert not failures, "\n".join(failures[:10])
    for r in now:
        assert leaks[r] == dict.fromkeys(USAGE, 0), (r, leaks[r], after[r], rest)
        assert after[r]["hot_referenced"] == after[r]["running"] == 0, after[r]
