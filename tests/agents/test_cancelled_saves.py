"""A run cancelled while LangGraph saves its checkpoint (a client's ``runs.cancel``, a
thread deleted, an ``interrupt`` multitask) leaves the database usable, on both
databases (SQLite and a real PostgreSQL server): the save lands whole, and the run store
writes at once after it. Found on SQLite: a save cancelled between its INSERT and its
COMMIT kept the file's write lock, and the thread's next ``runs.create`` waited out the
store's 30 s busy timeout and answered 500."""

from __future__ import annotations

import asyncio
from typing import Any

from langgraph.checkpoint.base import empty_checkpoint

from granikv_agents.checkpointers import open_checkpointer
from granikv_platform.database import open_database

# Enough event-loop turns to cancel the save at each of its awaits (lock, INSERT,
# COMMIT on SQLite; connection, pipeline on Postgres) and after it.
CANCEL_POINTS = 24


async def _cancelled_saves_land_and_leave_the_database_usable(url: str) -> None:
    db = await open_database(url)
    try:
        await db.run("CREATE TABLE IF NOT EXISTS probe (n INTEGER)")
        async with open_checkpointer(url) as saver:
            for turns in range(1, CANCEL_POINTS + 1):  # 1: the save has begun
                checkpoint = empty_checkpoint()
                config: Any = {"configurable": {"thread_id": f"t/th-{turns}",
                                                "checkpoint_ns": ""}}
                save = asyncio.create_task(saver.aput(config, checkpoint, {}, {}))  # as a step
                for _ in range(turns):
                    await asyncio.sleep(0)
                save.cancel()
                await asyncio.gather(save, return_exceptions=True)
                await saver.flush()
                # another writer gets the database at once (not after a busy timeout)
                await asyncio.wait_for(db.run("INSERT INTO probe (n) VALUES (?)", (turns,)),
                                       timeout=5.0)
                saved = await saver.aget_tuple({"configurable": {
                    "thread_id": f"t/th-{turns}", "checkpoint_ns": "",
                    "checkpoint_id": checkpoint["id"]}})
                assert saved is not None, f"the save cancelled after {turns} turns was lost"
        assert len(await db.run("SELECT n FROM probe")) == CANCEL_POINTS
    finally:
        await db.close()


def test_cancelled_saves_land_and_leave_the_database_usable(store_url: str) -> None:
    asyncio.run(_cancelled_saves_land_and_leave_the_database_usable(store_url))
