"""Threads and runs on both checkpointers (SQLite and a real PostgreSQL server), with
scripted chat models: multi-turn threads, tools, human in the loop across an executor
restart, cancel and join, streamed events and paging. LangGraph only: no Serve app."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage

from granikv_agents.team import Team
from granikv_agents.threads.executor import Conflict, NotFound, ThreadExecutor
from tests.agents.threads_kit import context_with, own_team, script

ROOT = Path(__file__).resolve().parents[2]
CHAT = own_team("granikv_agents.examples.approve:graph")
TOOLS = own_team("granikv_agents.examples.tools:graph")


def assistants(team: str) -> dict[str, Team]:
    return {"approve": CHAT, "tools": TOOLS} if team == "t" else {}


async def opened(url: str, model: Any) -> AsyncIterator[ThreadExecutor]:
    async with ThreadExecutor.open(url, assistants, context_with(model)) as ex:
        yield ex


def texts(values: dict[str, Any]) -> list[str]:
    return [m["content"] for m in values["messages"]]


async def _interrupt_resumes_after_the_executor_restarted(url: str) -> None:
    tid = f"th-{uuid.uuid4().hex[:8]}"
    async for ex in opened(url, script("draft one", "draft two")):
        await ex.create_thread("t", tid)
        run = await ex.create_run("t", tid, {"assistant_id": "approve", "input": {
            "messages": [{"role": "user", "content": "Write the release note."}]}})
        await ex.join("t", tid, run["run_id"])
        state = await ex.state("t", tid)
        assert state["next"] == ["review"]
        assert state["interrupts"][0]["value"]["draft"] == "draft one"
        assert (await ex.get_thread("t", tid))["status"] == "interrupted"
        again = await ex.create_run("t", tid, {"assistant_id": "approve",
                                               "command": {"resume": "shorter"}})
        await ex.join("t", tid, again["run_id"])
        assert (await ex.state("t", tid))["interrupts"][0]["value"]["draft"] == "draft two"
    async for ex in opened(url, script("unused")):  # a new executor on the same database
        last = await ex.create_run("t", tid, {"assistant_id": "approve",
                                              "command": {"resume": "yes"}})
        values = await ex.join("t", tid, last["run_id"])
        assert values["approved"] is True
        assert texts(values) == ["Write the release note.", "draft one", "Revise: shorter",
                                 "draft two"]
        runs = await ex.list_runs("t", tid, limit=10)
        assert [r["status"] for r in runs] == ["success"] * 3
        assert (await ex.get_thread("t", tid))["status"] == "idle"


async def _tools_run_and_the_thread_continues(url: str) -> None:
    call = AIMessage("", tool_calls=[{"name": "review_rule", "args": {"number": 2},
                                      "id": "call-1"}])
    model = script(call, "Rule 2 says: refuse.", "Two words.")
    tid = f"th-{uuid.uuid4().hex[:8]}"
    async for ex in opened(url, model):
        await ex.create_thread("t", tid)
        first = await ex.create_run("t", tid, {
            "assistant_id": "tools", "stream_mode": ["updates", "messages-tuple"],
            "input": {"messages": [{"role": "user", "content": "What is rule 2?"}]}})
        values = await ex.join("t", tid, first["run_id"])
        assert len(values["messages"]) == 4, (await ex.run("t", tid, first["run_id"])).error
        assert texts(values)[2] == "A prefix that does not fit HOT is refused, not evicted."
        assert texts(values)[3] == "Rule 2 says: refuse."
        assert model.bound == ["review_rule", "word_count"]
        events = [e async for e in ex.events("t", tid, first["run_id"]) if e is not None]
        kinds = [e.event for e in events]
        assert kinds[0] == "metadata" and {"updates", "messages"} <= set(kinds)
        assert [list(e.data) for e in events if e.event == "updates"] == [
            ["agent"], ["tools"], ["agent"]]
        tail = [e async for e in ex.events("t", tid, first["run_id"], after=events[-2].seq)]
        assert [e.seq for e in tail if e] == [events[-1].seq]  # Last-Event-ID resume
        second = await ex.create_run("t", tid, {"assistant_id": "tools", "input": {
            "messages": [{"role": "user", "content": "Shorter?"}]}})
        values = await ex.join("t", tid, second["run_id"])
        assert len(values["messages"]) == 6 and texts(values)[-1] == "Two words."


async def _cancel_join_busy_and_ownership(url: str) -> None:
    gate = asyncio.Event()

    class Waiting(type(script())):  # type: ignore[misc]
        async def _agenerate(self, *a: Any, **k: Any) -> Any:
            await gate.wait()
            return await super()._agenerate(*a, **k)

    tid = f"th-{uuid.uuid4().hex[:8]}"
    async for ex in opened(url, Waiting(messages=iter([AIMessage("late"), AIMessage("ok")]))):
        await ex.create_thread("t", tid)
        body = {"assistant_id": "approve", "input": {"messages": [
            {"role": "user", "content": "hi"}]}}
        run = await ex.create_run("t", tid, body)
        with pytest.raises(Conflict, match="busy"):
            await ex.create_run("t", tid, body)
        with pytest.raises(NotFound):
            await ex.get_thread("other", tid)
        got = await _until_two_pings_after_values(ex.events("t", tid, run["run_id"],
                                                            ping_s=0.05))
        # the input's values, then keep-alive pings while the model has not answered
        assert [e for e in got if e] == ["metadata", "values"] and got[-2:] == [None, None]
        await ex.cancel("t", tid, run["run_id"], wait=True)
        assert (await ex.run("t", tid, run["run_id"])).status == "interrupted"
        gate.set()
        again = await ex.create_run("t", tid, body)
        values = await ex.join("t", tid, again["run_id"])
        assert texts(values)[-1] == "late"
        with pytest.raises(Conflict):
            await ex.create_thread("t", tid)
        assert (await ex.create_thread("t", tid, if_exists="do_nothing"))["thread_id"] == tid


async def _resumes_after_the_executor_was_killed(url: str) -> None:
    tid = f"th-{uuid.uuid4().hex[:8]}"
    code = ("import asyncio, sys; from tests.agents import test_threads as t, threads_kit as k;"
            "asyncio.run(k.serve_until_killed(sys.argv[1], sys.argv[2], t.assistants))")
    proc = subprocess.Popen([sys.executable, "-c", code, url, tid], cwd=ROOT)
    try:
        async for store in opened_watch(url):
            deadline = time.monotonic() + 120
            while not await _ran_the_tool(store, tid):
                assert proc.poll() is None and time.monotonic() < deadline, "no tool call"
                await asyncio.sleep(0.3)
    finally:
        proc.kill()  # SIGKILL: the run is "running" in the store, its checkpoint saved
        proc.wait()
    model = script("There are 3 words.")
    async for ex in opened(url, model):  # resumes the run from its checkpoint
        run = (await ex.list_runs("t", tid))[0]
        values = await ex.join("t", tid, run["run_id"])
        assert [m["type"] for m in values["messages"]] == ["human", "ai", "tool", "ai"], (
            await ex.run("t", tid, run["run_id"]))
        assert texts(values)[2:] == ["3", "There are 3 words."]
        assert (await ex.run("t", tid, run["run_id"])).status == "success"


async def opened_watch(url: str) -> AsyncIterator[Any]:
    """The store alone (no executor: the killed process owns the runs)."""
    from granikv_agents.threads.store import ThreadStore
    from granikv_platform.database import open_database

    db = await open_database(url)
    try:
        yield await ThreadStore.open(db)
    finally:
        await db.close()


async def _ran_the_tool(store: Any, tid: str) -> bool:
    runs = await store.list_runs("t", tid) if await store.thread("t", tid) else []
    return bool(runs) and any(
        e.event == "values" and any(m["type"] == "tool" for m in e.data["messages"])
        for e in await store.events(runs[0].run_id))


async def _until_two_pings_after_values(events: AsyncIterator[Any]) -> list[str | None]:
    got: list[str | None] = []
    async for e in events:
        got.append(e.event if e else None)
        if ("values" in got and got[-2:] == [None, None]) or len(got) > 2000:
            return got
    return got


async def _list_runs_pages_in_the_database(url: str) -> None:
    async for ex in opened(url, script()):
        for k in range(10):
            await ex.store.create_thread(f"pg-{k}", f"team{k}", {})
        threads = [await ex.store.thread(f"team{k}", f"pg-{k}") for k in range(10)]
        for i in range(1000):
            t = threads[i % 10]
            assert t is not None
            await ex.store.create_run(f"r-{i:04d}", t, "approve", {}, {})
        t0 = time.perf_counter()
        pages = [await ex.list_runs(f"team{k}", f"pg-{k}", limit=25, offset=o)
                 for k in range(10) for o in range(0, 100, 25)]
        elapsed = time.perf_counter() - t0
        assert sum(len(p) for p in pages) == 1000 and elapsed < 1.0, elapsed
        assert pages[0][0]["run_id"] == "r-0990"  # newest first


def test_interrupt_resumes_after_the_executor_restarted(store_url: str) -> None:
    asyncio.run(_interrupt_resumes_after_the_executor_restarted(store_url))


def test_tools_run_and_the_thread_continues(store_url: str) -> None:
    asyncio.run(_tools_run_and_the_thread_continues(store_url))


def test_cancel_join_busy_and_ownership(store_url: str) -> None:
    asyncio.run(_cancel_join_busy_and_ownership(store_url))


def test_list_runs_pages_in_the_database(store_url: str) -> None:
    asyncio.run(_list_runs_pages_in_the_database(store_url))


def test_resumes_after_the_executor_was_killed(store_url: str) -> None:
    asyncio.run(_resumes_after_the_executor_was_killed(store_url))
