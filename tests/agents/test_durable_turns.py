"""A turn is reported (its ``turn`` event) only once its result is in the checkpoint.

LangGraph saves a finished task's writes in a background task and streams the task's
update without waiting for it. An executor that recorded the event at once and then
died before the write reached the database would run that turn again after the resume: a
finished turn repeated (seen with a real executor killed by tests/reliability's replica
kill test). Here the checkpoint's writes are slowed down, and the executor "dies" (its
run cancelled, the writes still in flight dropped) as soon as a turn is reported. The
resumed run must not run a reported turn again. No Ray, no engine: a fake backend.

The other side of the same gap: an executor that dies after a turn's write is saved and
before its event is logged (seen in a clean-clone CI run of the same reliability test: a
turn in the run's state, missing from its log). The resumed run does not run that turn
again; it must still report it, once. Both on SQLite and on Postgres.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

from granikv_agents import RunExecutor, load_spec
from granikv_agents.binding import Reply, TurnRequest
from granikv_agents.graph import RetryConfig
from granikv_agents.state import ContextPin
from granikv_agents.store import RunStore

TEAMS = Path(__file__).resolve().parents[2] / "deploy" / "teams"
QUICK = RetryConfig(max_attempts=2, initial_interval_s=0.05, max_interval_s=0.1)


class FakeBackend:
    def __init__(self, team: str) -> None:
        self.team = team
        self.calls: Counter[str] = Counter()

    async def pin_context(self, text: str) -> ContextPin:
        return ContextPin(prefix_id=f"{self.team}-ctx", length=len(text), state="ready",
                          pinned=True, hot_start=1, reused=False)

    async def read_context(self) -> ContextPin | None:
        return await self.pin_context("x")

    async def chat(self, request: TurnRequest, context: ContextPin) -> Reply:
        self.calls[request.agent] += 1
        await asyncio.sleep(0.01)
        return Reply(text=f"{request.agent} says hi", prompt_tokens=3, completion_tokens=3)

    async def aclose(self) -> None:
        return None


def saver_class(url: str) -> Any:
    """LangGraph's saver that the executor's checkpointer extends for ``url``."""
    if "://" in url:
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

        return AsyncPostgresSaver
    return AsyncSqliteSaver


def test_a_reported_turn_is_never_run_again(store_url: str,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    spec = load_spec(TEAMS / "review.yaml")
    spec = spec.model_copy(update={"limits": spec.limits.model_copy(
        update={"concurrency": 1})})  # turns finish one at a time
    db = store_url
    dead = {"now": False}
    saver = saver_class(db)
    save = saver.aput_writes

    async def slow_writes(self: Any, config: Any, writes: Any, task_id: str,
                          task_path: str = "") -> None:
        await asyncio.sleep(0.3)
        if dead["now"]:
            return  # the process died before this write reached the file
        await save(self, config, writes, task_id, task_path)

    monkeypatch.setattr(saver, "aput_writes", slow_writes)
    first, second = FakeBackend("red"), FakeBackend("red")

    async def die_after_the_first_reported_turn() -> tuple[str, set[str]]:
        async with RunExecutor.open(db, lambda _: first, QUICK, drain_s=0) as ex:
            rec = await ex.start(spec)
            while True:
                events = await ex.store.events(rec.run_id, 0)
                reported = {e.view()["agent"] for e in events if e.type == "turn"}
                if reported:
                    break
                await asyncio.sleep(0.005)
            dead["now"] = True  # from here on nothing reaches the file
            ex._tasks[rec.run_id].cancel()
            return rec.run_id, reported

    run_id, reported = asyncio.run(die_after_the_first_reported_turn())
    dead["now"] = False

    async def resume() -> list[Any]:
        async with RunExecutor.open(db, lambda _: second, QUICK) as ex:
            await ex.resume(run_id)
            assert (await ex.wait(run_id, 60)).status == "succeeded"
            return await ex.store.events(run_id, 0)

    events = asyncio.run(resume())
    logged = Counter(e.view()["agent"] for e in events if e.type == "turn")
    assert not reported & set(second.calls), (reported, second.calls)  # not run again
    assert set(logged.values()) == {1} and len(logged) == 9, logged


def test_a_saved_turn_whose_event_was_lost_is_reported_once_on_resume(
        store_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = load_spec(TEAMS / "review.yaml")
    spec = spec.model_copy(update={"limits": spec.limits.model_copy(
        update={"concurrency": 1})})
    db = store_url
    lost: dict[str, Any] = {}
    add_event = RunStore.add_event

    async def dies_on_the_second_turn_event(self: RunStore, run_id: str, type_: str,
                                            data: dict[str, Any]) -> int:
        if type_ == "turn" and not lost and any(
                e.type == "turn" for e in await self.events(run_id, 0)):
            lost.update(data)  # saved in the checkpoint (flushed), never logged
            raise asyncio.CancelledError  # the process died here
        return await add_event(self, run_id, type_, data)

    first, second = FakeBackend("red"), FakeBackend("red")

    async def die() -> str:
        monkeypatch.setattr(RunStore, "add_event", dies_on_the_second_turn_event)
        async with RunExecutor.open(db, lambda _: first, QUICK, drain_s=0) as ex:
            rec = await ex.start(spec)
            while rec.run_id in ex._tasks:
                await asyncio.sleep(0.005)
        monkeypatch.setattr(RunStore, "add_event", add_event)
        return rec.run_id

    run_id = asyncio.run(die())
    assert lost, "the executor never lost a turn event"

    async def resume() -> tuple[list[Any], dict[str, Any]]:
        async with RunExecutor.open(db, lambda _: second, QUICK) as ex:
            await ex.resume(run_id)
            assert (await ex.wait(run_id, 60)).status == "succeeded"
            return [e.view() for e in await ex.store.events(run_id, 0)], await ex.view(run_id)

    events, view = asyncio.run(resume())
    assert second.calls[lost["agent"]] == 0  # saved: not run again
    turns = [e for e in events if e["type"] == "turn"]
    logged = Counter((e["agent"], e["round"], e["kind"]) for e in turns)
    state = {(t["agent"], t["round"], t["kind"]) for t in view["turns"]}
    assert set(logged) == state and set(logged.values()) == {1}, logged
    # the lost turn, and any other turn whose write the dying executor still saved on
    # its way out (its connection closes after the saves in flight)
    recovered = [e for e in turns if e.get("recovered")]
    (mine,) = [e for e in recovered if (e["agent"], e["round"], e["kind"]) == (
        lost["agent"], lost["round"], lost["kind"])]
    assert mine["text"] == lost["text"]
    resumed_at = next(e["seq"] for e in events if e.get("status") == "resumed")
    assert all(e["seq"] < resumed_at for e in recovered)  # the previous attempt's turns
