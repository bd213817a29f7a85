"""RunStore on a real SQLite file and on a real Postgres database: runs by team and
status, events numbered per run even when written concurrently, everything still there
after reopening; one owner per store."""

from __future__ import annotations

import asyncio
import os
import time

import pytest

from granikv_agents.owner import StoreBusy, StoreOwner
from granikv_agents.store import RunStore


def test_runs_and_events_survive_reopening(store_url: str) -> None:
    db = store_url

    async def write() -> None:
        store = await RunStore.open(db)
        await store.create("r1", "red", "{}", "task 1")
        await store.create("r2", "blue", "{}", "task 2")
        await store.set_status("r1", "failed", "boom")
        await store.set_status("r1", "running", resumed=True)
        seqs = await asyncio.gather(*(store.add_event("r1", "turn", {"i": i}) for i in range(40)))
        assert sorted(seqs) == list(range(1, 41))
        assert await store.add_event("r2", "status", {"status": "running"}) == 1
        await store.close()

    async def read() -> None:
        store = await RunStore.open(db)
        r1 = await store.get("r1")
        assert r1 is not None and (r1.status, r1.error, r1.attempts) == ("running", None, 2)
        assert [r.run_id for r in await store.list_runs("red")] == ["r1"]
        assert [r.run_id for r in await store.list_runs()] == ["r1", "r2"]
        assert await store.list_runs(statuses=frozenset({"failed"})) == []
        events = await store.events("r1", after=35)
        assert [e.seq for e in events] == [36, 37, 38, 39, 40]
        assert sorted(e.data["i"] for e in await store.events("r1")) == list(range(40))
        assert events[0].view()["type"] == "turn" and await store.get("nope") is None
        await store.close()

    asyncio.run(write())
    asyncio.run(read())


def test_one_executor_per_store(store_url: str) -> None:
    db = store_url
    # a file names the process that holds it; Postgres, the server process of its session
    holder = f"pid {os.getpid()}" if "://" not in db else "server pid [0-9]+"

    async def go() -> None:
        first = await StoreOwner.acquire(db)
        with pytest.raises(StoreBusy, match=f"owned by another executor \\({holder}\\)"):
            await StoreOwner.acquire(db, wait_s=0.6)
        await first.release()
        await (await StoreOwner.acquire(db, wait_s=0)).release()  # free again

    asyncio.run(go())


def test_a_thousand_runs_of_ten_teams_list_in_pages_under_a_second(store_url: str) -> None:
    async def go() -> float:
        store = await RunStore.open(store_url)
        spec = '{"team": "x", "context": "' + "c" * 2000 + '"}'  # a spec of real size
        for i in range(1000):
            await store.create(f"r{i:04d}", f"team{i % 10}", spec, "task")
            if i % 3 == 0:
                await store.set_status(f"r{i:04d}", "succeeded")
        t0 = time.perf_counter()
        pages = [await store.list_runs(f"team{k}", limit=25, offset=o)
                 for k in range(10) for o in range(0, 100, 25)]
        done = await store.list_runs("team3", frozenset({"succeeded"}), limit=5, offset=2)
        elapsed = time.perf_counter() - t0
        await store.close()
        assert sum(len(p) for p in pages) == 1000
        assert [r.run_id for r in pages[4][:2]] == ["r0001", "r0011"]  # team1, oldest first
        assert [r.run_id for r in done] == ["r0063", "r0093", "r0123", "r0153", "r0183"]
        return elapsed

    elapsed = asyncio.run(go())
    assert elapsed < 1.0, f"{elapsed:.3f} s"
