"""Admission to a thread is atomic and interruption idempotent, on both checkpointers
(SQLite and a real PostgreSQL server): concurrent ``reject`` runs on an idle thread
admit exactly one; concurrent cancels, and concurrent ``interrupt`` runs, end each
interrupted run ``interrupted`` once, leave the thread ``idle`` and nothing pending or
running, and a new executor on the same database resumes none of them. A failed run's
wait answers LangGraph Server's ``__error__`` body, not the thread's values. LangGraph
only: no Serve app."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

from granikv_agents.team import Team
from granikv_agents.threads.api import ThreadApi
from granikv_agents.threads.executor import Conflict, ThreadExecutor
from granikv_platform.protocol import JsonItem
from tests.agents.threads_kit import Held, context_with, own_team

CHAT = own_team("granikv_agents.examples.tools:graph")  # the model, no platform call
N = 20


def assistants(team: str) -> dict[str, Team]:
    return {"chat": CHAT} if team == "t" else {}


async def opened(url: str, model: Held) -> AsyncIterator[ThreadExecutor]:
    async with ThreadExecutor.open(url, assistants, context_with(model)) as ex:
        yield ex


def ask(text: str) -> dict[str, Any]:
    return {"assistant_id": "chat", "input": {"messages": [{"role": "user", "content": text}]}}


def texts(values: dict[str, Any]) -> list[str]:
    return [m["content"] for m in values.get("messages", [])]


async def until_called(model: Held, n: int) -> None:
    for _ in range(2000):
        if len(model.calls) >= n:
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"{len(model.calls)} model calls, expected {n}")


async def no_run_left(ex: ThreadExecutor, tid: str) -> None:
    """Nothing of the thread is pending or running, in the store and in the slots."""
    runs = await ex.list_runs("t", tid, limit=100)
    assert not [r for r in runs if r["status"] in ("pending", "running")], runs
    assert not [r for r in runs if ex.slots.live(r["run_id"])], runs
    assert (await ex.get_thread("t", tid))["status"] == "idle"


async def resumes_nothing(url: str, tid: str, before: list[str]) -> None:
    """A new executor on the same database: no run resumed, nothing appended."""
    model = Held()
    model.gate.set()
    async for ex in opened(url, model):
        await asyncio.sleep(0.3)  # a resumed run would have called the model by now
        assert model.calls == []
        assert texts((await ex.state("t", tid))["values"]) == before
        await no_run_left(ex, tid)


async def _concurrent_rejects_admit_one(url: str) -> None:
    tid = f"th-{uuid.uuid4().hex[:8]}"
    model = Held()
    async for ex in opened(url, model):
        await ex.create_thread("t", tid)
        got = await asyncio.gather(*[ex.create_run("t", tid, {
            **ask(f"q{i}"), "multitask_strategy": "reject"}) for i in range(N)],
            return_exceptions=True)
        admitted = [g for g in got if isinstance(g, dict)]
        refused = [g for g in got if isinstance(g, Conflict)]
        assert (len(admitted), len(refused)) == (1, N - 1), got
        assert all("busy" in str(e) for e in refused)
        model.gate.set()
        values = await ex.join("t", tid, admitted[0]["run_id"])
        assert len(texts(values)) == 2 and len(model.calls) == 1
        assert len(await ex.list_runs("t", tid, limit=100)) == 1
        await no_run_left(ex, tid)


async def _concurrent_cancels_end_the_run_once(url: str) -> None:
    tid = f"th-{uuid.uuid4().hex[:8]}"
    model = Held()
    async for ex in opened(url, model):
        await ex.create_thread("t", tid)
        run = await ex.create_run("t", tid, ask("slow"))
        await until_called(model, 1)
        await asyncio.gather(*[ex.cancel("t", tid, run["run_id"], wait=True)
                               for _ in range(8)])
        ended = await ex.run("t", tid, run["run_id"])
        assert (ended.status, ended.error) == ("interrupted", "cancelled")
        await ex.cancel("t", tid, run["run_id"], wait=True)  # again: still interrupted
        assert (await ex.run("t", tid, run["run_id"])).updated_at == ended.updated_at
        await no_run_left(ex, tid)
        before = texts((await ex.state("t", tid))["values"])
        assert before == ["slow"]
    await resumes_nothing(url, tid, before)


async def _concurrent_interrupts_end_each_run_once(url: str) -> None:
    tid = f"th-{uuid.uuid4().hex[:8]}"
    model = Held()
    async for ex in opened(url, model):
        await ex.create_thread("t", tid)
        first = await ex.create_run("t", tid, ask("q-first"))
        queued = await ex.create_run("t", tid, {**ask("q-queued"),
                                                "multitask_strategy": "enqueue"})
        await until_called(model, 1)
        took = await asyncio.gather(*[ex.create_run("t", tid, {
            **ask(f"q{i}"), "multitask_strategy": "interrupt"}) for i in range(N)])
        model.gate.set()
        runs = await ex.list_runs("t", tid, limit=100)
        last = next(r for r in runs if ex.slots.live(r["run_id"]))
        await ex.join("t", tid, last["run_id"])
        statuses = {r["run_id"]: (r["status"], r["error"])
                    for r in await ex.list_runs("t", tid, limit=100)}
        assert len(statuses) == N + 2
        assert statuses[last["run_id"]] == ("success", None)
        assert statuses[queued["run_id"]] == ("interrupted", "cancelled")
        others = [statuses[r["run_id"]] for r in [first, *took]
                  if r["run_id"] != last["run_id"]]
        assert others == [("interrupted", "cancelled")] * N, statuses
        await no_run_left(ex, tid)
        before = texts((await ex.state("t", tid))["values"])
        assert before[-1] == f"answer to {before[-2]}"
        assert "answer to q-first" not in before and "q-queued" not in before
    await resumes_nothing(url, tid, before)


async def _failed_run_waits_with_its_error(url: str) -> None:
    tid = f"th-{uuid.uuid4().hex[:8]}"
    model = Held(fail="boom")
    model.gate.set()
    async for ex in opened(url, model):
        api = ThreadApi(ex, lambda team: {"chat": ""}, 15.0)
        await ex.create_thread("t", tid)
        run = await ex.create_run("t", tid, ask("boom"))
        item = await api.call("t", "join", {"thread_id": tid, "run_id": run["run_id"]})
        assert isinstance(item, JsonItem) and item.status == 200  # as LangGraph Server
        assert item.body == {"__error__": {"error": "ValueError",
                                           "message": "the model refused 'boom'"}}, item
        assert (await ex.get_thread("t", tid))["status"] == "error"
        again = await ex.create_run("t", tid, ask("fine"))  # the thread takes the next run
        values = await ex.join("t", tid, again["run_id"])
        assert texts(values)[-2:] == ["fine", "answer to fine"]


def test_concurrent_reject_runs_admit_exactly_one(store_url: str) -> None:
    asyncio.run(_concurrent_rejects_admit_one(store_url))


def test_concurrent_cancels_end_the_run_once(store_url: str) -> None:
    asyncio.run(_concurrent_cancels_end_the_run_once(store_url))


def test_concurrent_interrupts_end_each_run_once(store_url: str) -> None:
    asyncio.run(_concurrent_interrupts_end_each_run_once(store_url))


def test_failed_run_waits_with_its_error(store_url: str) -> None:
    asyncio.run(_failed_run_waits_with_its_error(store_url))
