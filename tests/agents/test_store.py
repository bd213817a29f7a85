"""RunStore on a real SQLite file: runs by team and status, events numbered per run even
when written concurrently, everything still there after reopening; one owner per file."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from granikv_agents.owner import StoreBusy, StoreOwner
from granikv_agents.store import RunStore


def test_runs_and_events_survive_reopening(tmp_path: Path) -> None:
    db = str(tmp_path / "runs.sqlite")

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


def test_one_executor_per_store(tmp_path: Path) -> None:
    db = str(tmp_path / "runs.sqlite")

    async def go() -> None:
        first = await StoreOwner.acquire(db)
        with pytest.raises(StoreBusy, match=f"owned by another executor \\(pid {os.getpid()}\\)"):
            await StoreOwner.acquire(db, wait_s=0.6)
        first.release()
        (await StoreOwner.acquire(db, wait_s=0)).release()  # free again

    asyncio.run(go())
