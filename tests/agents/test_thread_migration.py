"""Threads that the previous release stored (table ``granikv_threads``, keyed by thread
id alone; checkpoints under the bare thread id) are carried over to team-scoped ids when
the store opens, on both databases (SQLite and a real PostgreSQL server): listed for
their team, their state, history, runs and events intact, absent for every other team,
carried exactly once (also after a carry-over that stopped half-way)."""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from typing import Any

import pytest

from granikv_agents.checkpointers import open_checkpointer
from granikv_agents.graphs import team_graph
from granikv_agents.threads.checkpoints import config_of
from granikv_agents.threads.executor import NotFound
from granikv_platform.database import Database, open_database
from tests.agents.test_thread_surface import CHAT, ask, opened, run_to_end, texts
from tests.agents.threads_kit import context_with, script

# The previous release's thread table, as its store.py created it.
OLD_THREADS_DDL = (
    "CREATE TABLE IF NOT EXISTS granikv_threads (thread_id TEXT PRIMARY KEY, team TEXT NOT "
    "NULL, assistant_id TEXT, status TEXT NOT NULL, metadata TEXT NOT NULL, created_at "
    "DOUBLE PRECISION NOT NULL, updated_at DOUBLE PRECISION NOT NULL)")
OLD_RUNS_DDL = (
    "CREATE TABLE IF NOT EXISTS granikv_thread_runs (run_id TEXT PRIMARY KEY, thread_id TEXT "
    "NOT NULL, team TEXT NOT NULL, assistant_id TEXT NOT NULL, status TEXT NOT NULL, "
    "metadata TEXT NOT NULL, kwargs TEXT NOT NULL, error TEXT, created_at DOUBLE PRECISION "
    "NOT NULL, updated_at DOUBLE PRECISION NOT NULL)")
OLD_EVENTS_DDL = (
    "CREATE TABLE IF NOT EXISTS granikv_thread_events (run_id TEXT NOT NULL, seq INTEGER NOT "
    "NULL, event TEXT NOT NULL, data TEXT NOT NULL, PRIMARY KEY (run_id, seq))")
CARRIED = "granikv_agents.threads.store"


async def old_release_thread(db: Database, url: str, team: str, thread_id: str,
                             turns: list[str], replies: list[str]) -> str:
    """A thread as the previous release left it: its row, a finished run with one event,
    and the checkpoints of ``turns`` run by the real graph under the bare thread id."""
    now = time.time()
    await db.run("INSERT INTO granikv_threads (thread_id, team, assistant_id, status, "
                 "metadata, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                 (thread_id, team, "chat", "idle", json.dumps({"owner": team}), now, now))
    run_id = str(uuid.uuid4())
    await db.run("INSERT INTO granikv_thread_runs (run_id, thread_id, team, assistant_id, "
                 "status, metadata, kwargs, error, created_at, updated_at) VALUES "
                 "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                 (run_id, thread_id, team, "chat", "success", "{}",
                  json.dumps({"input": ask(turns[-1]), "stream_mode": ["values"]}), None,
                  now, now))
    await db.run("INSERT INTO granikv_thread_events (run_id, seq, event, data) VALUES "
                 "(?, ?, ?, ?)", (run_id, 1, "metadata", json.dumps({"run_id": run_id})))
    async with open_checkpointer(url) as saver:
        graph = team_graph(CHAT, saver)
        ctx = context_with(script(*replies))(CHAT)
        for turn in turns:
            await graph.ainvoke(ask(turn), config_of(thread_id), context=ctx,
                                durability="sync")
    return run_id


async def old_release_database(url: str) -> dict[str, str]:
    """Two teams' threads in the previous release's schema (an id with a ``/`` too: the
    new scheme must not read its bare-id checkpoints as team ``u``'s thread ``b``)."""
    db = await open_database(url)
    try:
        for ddl in (OLD_THREADS_DDL, OLD_RUNS_DDL, OLD_EVENTS_DDL):
            await db.run(ddl)
        return {
            "t1": await old_release_thread(db, url, "t", "t1", ["first", "second"],
                                           ["one", "two"]),
            "u1": await old_release_thread(db, url, "u", "u1", ["hi"], ["hello"]),
            "u/b": await old_release_thread(db, url, "t", "u/b", ["slash"], ["ok"]),
        }
    finally:
        await db.close()


async def bare_history(saver: Any, thread_id: str) -> list[list[str]]:
    """The messages at each checkpoint under the bare id (the previous release's)."""
    graph = team_graph(CHAT, saver)
    return [[str(m.content) for m in s.values.get("messages", [])]
            async for s in graph.aget_state_history(config_of(thread_id))]


def carried_counts(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == CARRIED and "carried over" in r.getMessage()]


async def _old_threads_are_carried_over(url: str, caplog: pytest.LogCaptureFixture) -> None:
    runs = await old_release_database(url)
    async for ex in opened(url, script("three")):
        assert [t["thread_id"] for t in await ex.search_threads("t")] == ["u/b", "t1"]
        assert [t["thread_id"] for t in await ex.search_threads("u")] == ["u1"]
        assert (await ex.get_thread("t", "t1"))["metadata"] == {"owner": "t"}
        assert texts((await ex.state("t", "t1"))["values"]) == ["first", "one", "second",
                                                                "two"]
        hist = [texts(h["values"]) for h in await ex.history("t", "t1", limit=100)]
        assert hist[:2] == [["first", "one", "second", "two"], ["first", "one", "second"]]
        assert hist == await bare_history(ex.saver, "t1")  # every checkpoint, in order
        assert texts((await ex.state("u", "u1"))["values"]) == ["hi", "hello"]
        assert texts((await ex.state("t", "u/b"))["values"]) == ["slash", "ok"]
        # runs and their events are the thread's still
        assert [r["run_id"] for r in await ex.list_runs("t", "t1")] == [runs["t1"]]
        assert [e.event async for e in ex.events("t", "t1", runs["t1"], ping_s=0.05)
                if e is not None][:1] == ["metadata"]
        # another team still cannot see it
        for op in (ex.get_thread("u", "t1"), ex.state("u", "t1"), ex.history("u", "t1"),
                   ex.list_runs("u", "t1"), ex.run("u", "t1", runs["t1"])):
            with pytest.raises(NotFound):
                await op
        # nor read a carried thread's checkpoints as one of its own: team t's old "u/b"
        # was stored under the LangGraph thread id that team u's thread "b" has now
        await ex.create_thread("u", "b")
        await ex.store.set_thread("u", "b", "idle", "chat")
        assert (await ex.state("u", "b"))["values"] == {}
        # the conversation continues from its carried checkpoint
        more = await run_to_end(ex, "t", "t1", {"assistant_id": "chat", "input": ask("third")})
        assert texts(more) == ["first", "one", "second", "two", "third", "three"]
        await ex.delete_thread("u", "u1")
    assert carried_counts(caplog) == ["GraniKV: carried over 3 threads of the previous "
                                      "release to team-scoped thread ids"]
    caplog.clear()
    async for ex in opened(url, script()):  # a second open carries nothing more
        assert texts((await ex.state("t", "t1"))["values"])[-2:] == ["third", "three"]
        # u1 stays deleted: only the thread team u made itself
        assert [t["thread_id"] for t in await ex.search_threads("u")] == ["b"]
    assert carried_counts(caplog) == []


def test_old_threads_are_carried_over(store_url: str, caplog: pytest.LogCaptureFixture
                                      ) -> None:
    caplog.set_level(logging.INFO, logger=CARRIED)
    asyncio.run(_old_threads_are_carried_over(store_url, caplog))


async def _a_carry_over_that_stopped_half_way_completes(
        url: str, caplog: pytest.LogCaptureFixture) -> None:
    from granikv_agents.threads.store import carry_over_thread, create_tables, old_threads

    await old_release_database(url)
    db = await open_database(url)
    try:  # a process that died after carrying one thread over, before the others
        await create_tables(db)
        async with open_checkpointer(url) as saver:
            first = (await old_threads(db))[0]
            assert await carry_over_thread(db, saver, first)
    finally:
        await db.close()
    async for ex in opened(url, script()):
        assert [t["thread_id"] for t in await ex.search_threads("t")] == ["u/b", "t1"]
        assert texts((await ex.state("t", "t1"))["values"]) == ["first", "one", "second",
                                                                "two"]
        assert texts((await ex.state("u", "u1"))["values"]) == ["hi", "hello"]
        hist = [texts(h["values"]) for h in await ex.history("t", "t1", limit=100)]
        assert hist == await bare_history(ex.saver, "t1")  # no checkpoint lost or twice
    assert carried_counts(caplog) == ["GraniKV: carried over 2 threads of the previous "
                                      "release to team-scoped thread ids"]


def test_a_carry_over_that_stopped_half_way_completes(
        store_url: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=CARRIED)
    asyncio.run(_a_carry_over_that_stopped_half_way_completes(store_url, caplog))
