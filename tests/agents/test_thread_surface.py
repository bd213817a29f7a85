"""The rest of LangGraph Server's thread surface on the executor, on both checkpointers
(SQLite and a real PostgreSQL server), with scripted chat models: history, state
updates, copies, deletes, metadata; malformed input refused before it is checkpointed;
thread ids scoped by team; ``interrupt_before``, ``enqueue`` / ``interrupt``, runs from
a checkpoint, the ``events`` and ``debug`` stream modes; assistants' graphs and schemas.
LangGraph only: no Serve app (the SDK drives the same through the platform in
test_langgraph_sdk.py)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from langchain_core.messages import AIMessage

from granikv_agents.team import Team
from granikv_agents.threads.describe import graph_view, schemas_view
from granikv_agents.threads.executor import Conflict, NotFound, ThreadExecutor
from tests.agents.threads_kit import context_with, own_team, script

APPROVE = own_team("granikv_agents.examples.approve:graph")
CHAT = own_team("granikv_agents.examples.tools:graph")  # the model, no platform call


def assistants(team: str) -> dict[str, Team]:
    return {"approve": APPROVE, "chat": CHAT} if team in ("t", "u") else {}


async def opened(url: str, model: Any) -> AsyncIterator[ThreadExecutor]:
    async with ThreadExecutor.open(url, assistants, context_with(model)) as ex:
        yield ex


def ask(text: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}]}


def texts(values: dict[str, Any]) -> list[str]:
    return [m["content"] for m in values.get("messages", [])]


async def run_to_end(ex: ThreadExecutor, team: str, tid: str, body: dict[str, Any]
                     ) -> dict[str, Any]:
    run = await ex.create_run(team, tid, body)
    return await ex.join(team, tid, run["run_id"])


async def _history_update_copy_delete(url: str) -> None:
    tid = f"th-{uuid.uuid4().hex[:8]}"
    async for ex in opened(url, script("one", "two", "three")):
        await ex.create_thread("t", tid, {"owner": "ann"})
        assert await ex.history("t", tid) == []  # no run yet
        await run_to_end(ex, "t", tid, {"assistant_id": "chat", "input": ask("first")})
        await run_to_end(ex, "t", tid, {"assistant_id": "chat", "input": ask("second")})
        hist = await ex.history("t", tid, limit=100)
        assert [texts(h["values"]) for h in hist[:2]] == [
            ["first", "one", "second", "two"], ["first", "one", "second"]]
        assert all(h["checkpoint"]["thread_id"] == tid for h in hist)
        ids = [h["checkpoint_id"] for h in hist]
        assert len(set(ids)) == len(ids) and hist[0]["parent_checkpoint"]["checkpoint_id"] \
            == ids[1]
        older = await ex.history("t", tid, limit=2, before=ids[0])
        assert [h["checkpoint_id"] for h in older] == ids[1:3]
        after_first = next(h for h in hist  # the end of the first run
                           if texts(h["values"]) == ["first", "one"] and not h["next"])
        at = await ex.state("t", tid, after_first["checkpoint_id"])
        assert texts(at["values"]) == ["first", "one"]
        with pytest.raises(NotFound):
            await ex.state("t", tid, "no-such-checkpoint")

        # a state update is a new checkpoint; the next run continues from it
        upd = await ex.update_state("t", tid, {"messages": [
            {"role": "user", "content": "added"}]}, as_node="agent")
        assert upd["checkpoint"]["thread_id"] == tid
        assert texts((await ex.state("t", tid))["values"])[-1] == "added"
        assert (await ex.history("t", tid, limit=1))[0]["checkpoint_id"] == \
            upd["checkpoint"]["checkpoint_id"]

        # a run from an earlier checkpoint forks there
        forked = await run_to_end(ex, "t", tid, {
            "assistant_id": "chat", "input": ask("fork"),
            "checkpoint_id": after_first["checkpoint_id"]})
        assert texts(forked) == ["first", "one", "fork", "three"]

        patched = await ex.update_thread("t", tid, {"stage": "review"})
        assert patched["metadata"] == {"owner": "ann", "stage": "review"}

        copy = await ex.copy_thread("t", tid)
        cid = copy["thread_id"]
        assert cid != tid and copy["metadata"] == patched["metadata"]
        assert (await ex.state("t", cid))["values"] == (await ex.state("t", tid))["values"]
        assert [h["values"] for h in await ex.history("t", cid, limit=100)] == [
            h["values"] for h in await ex.history("t", tid, limit=100)]

        await ex.delete_thread("t", tid)
        for gone in (ex.get_thread("t", tid), ex.state("t", tid), ex.history("t", tid),
                     ex.list_runs("t", tid)):
            with pytest.raises(NotFound):
                await gone
        assert [c async for c in ex.saver.alist(
            {"configurable": {"thread_id": f"t/{tid}"}})] == []
        assert texts((await ex.state("t", cid))["values"])[-1] == "three"  # the copy stays
        await ex.create_thread("t", tid)  # the id is free again, and empty
        assert (await ex.state("t", tid))["values"] == {}


async def _malformed_input_never_reaches_the_thread(url: str) -> None:
    tid = f"th-{uuid.uuid4().hex[:8]}"
    async for ex in opened(url, script("fine", "again")):
        await ex.create_thread("t", tid)
        await run_to_end(ex, "t", tid, {"assistant_id": "chat", "input": ask("hello")})
        before = await ex.state("t", tid)
        bad = [{"messages": [{"role": 5}]}, {"messages": [{"role": 5, "content": "x"}]},
               {"messages": 5}, {"nope": 1}]
        for body in bad:
            with pytest.raises(ValueError, match="input"):
                await ex.create_run("t", tid, {"assistant_id": "chat", "input": body})
        with pytest.raises(ValueError, match=r"command\.update"):
            await ex.create_run("t", tid, {"assistant_id": "chat",
                                           "command": {"update": {"messages": [{"role": 5}]}}})
        with pytest.raises(ValueError, match="values"):
            await ex.update_state("t", tid, {"messages": [{"role": 5}]})
        assert await ex.state("t", tid) == before  # untouched, still readable
        assert len(await ex.list_runs("t", tid)) == 1  # no run was stored
        values = await run_to_end(ex, "t", tid, {"assistant_id": "chat",
                                                 "input": ask("and now")})
        assert texts(values) == ["hello", "fine", "and now", "again"]


async def _thread_ids_are_scoped_by_team(url: str) -> None:
    tid = f"th-{uuid.uuid4().hex[:8]}"
    async for ex in opened(url, script("mine", "theirs")):
        await ex.create_thread("t", tid, {"who": "t"})
        run = await ex.create_run("t", tid, {"assistant_id": "chat", "input": ask("t asks")})
        await ex.join("t", tid, run["run_id"])
        rid = run["run_id"]
        foreign = [
            ex.get_thread("u", tid), ex.state("u", tid), ex.history("u", tid),
            ex.update_state("u", tid, {"messages": [{"role": "user", "content": "x"}]}),
            ex.update_thread("u", tid, {"who": "u"}), ex.copy_thread("u", tid),
            ex.delete_thread("u", tid), ex.list_runs("u", tid), ex.run("u", tid, rid),
            ex.join("u", tid, rid), ex.cancel("u", tid, rid),
            ex.create_run("u", tid, {"assistant_id": "chat", "input": ask("u asks")})]
        for op in foreign:
            with pytest.raises(NotFound) as absent:
                await op
            assert "no thread" in str(absent.value)  # the same as an absent id
        with pytest.raises(NotFound):
            await _first(ex.events("u", tid, rid))
        assert [t["thread_id"] for t in await ex.search_threads("u")] == []
        # the same id is the other team's own thread, independent of the first
        await ex.create_thread("u", tid, {"who": "u"})
        theirs = await run_to_end(ex, "u", tid, {"assistant_id": "chat",
                                                 "input": ask("u asks")})
        assert texts(theirs) == ["u asks", "theirs"]
        assert texts((await ex.state("t", tid))["values"]) == ["t asks", "mine"]
        assert (await ex.get_thread("t", tid))["metadata"] == {"who": "t"}
        await ex.delete_thread("u", tid)
        assert texts((await ex.state("t", tid))["values"]) == ["t asks", "mine"]


async def _first(events: AsyncIterator[Any]) -> Any:
    async for e in events:
        return e
    return None


async def _interrupt_before_and_multitask(url: str) -> None:
    gate = asyncio.Event()

    class Gated(type(script())):  # type: ignore[misc]
        async def _agenerate(self, *a: Any, **k: Any) -> Any:
            await gate.wait()
            return await super()._agenerate(*a, **k)

    tid = f"th-{uuid.uuid4().hex[:8]}"
    model = Gated(messages=iter([AIMessage(f"answer {i}") for i in range(1, 6)]))
    async for ex in opened(url, model):
        await ex.create_thread("t", tid)
        gate.set()
        paused = await run_to_end(ex, "t", tid, {"assistant_id": "chat", "input": ask("q1"),
                                                 "interrupt_before": ["agent"]})
        assert texts(paused) == ["q1"]
        assert (await ex.state("t", tid))["next"] == ["agent"]
        assert (await ex.get_thread("t", tid))["status"] == "interrupted"
        done = await run_to_end(ex, "t", tid, {"assistant_id": "chat"})  # continues
        assert texts(done) == ["q1", "answer 1"]
        with pytest.raises(ValueError, match="no node"):
            await ex.create_run("t", tid, {"assistant_id": "chat", "input": ask("x"),
                                           "interrupt_before": ["nowhere"]})

        gate.clear()
        first = await ex.create_run("t", tid, {"assistant_id": "chat", "input": ask("q2")})
        with pytest.raises(Conflict, match="busy"):
            await ex.create_run("t", tid, {"assistant_id": "chat", "input": ask("no")})
        queued = await ex.create_run("t", tid, {"assistant_id": "chat", "input": ask("q3"),
                                                "multitask_strategy": "enqueue"})
        assert queued["status"] == "pending" and queued["multitask_strategy"] == "enqueue"
        dropped = await ex.create_run("t", tid, {"assistant_id": "chat", "input": ask("q4"),
                                                 "multitask_strategy": "enqueue"})
        await ex.cancel("t", tid, dropped["run_id"])  # a queued run is cancelled unrun
        gate.set()
        values = await ex.join("t", tid, queued["run_id"])
        assert texts(values)[2:] == ["q2", "answer 2", "q3", "answer 3"]
        statuses = {r["run_id"]: r["status"] for r in await ex.list_runs("t", tid)}
        assert [statuses[r["run_id"]] for r in (first, queued, dropped)] == [
            "success", "success", "interrupted"]

        gate.clear()
        slow = await ex.create_run("t", tid, {"assistant_id": "chat", "input": ask("q5")})
        gate_task = asyncio.get_running_loop().call_later(0.5, gate.set)
        took = await ex.create_run("t", tid, {"assistant_id": "chat", "input": ask("q6"),
                                              "multitask_strategy": "interrupt"})
        values = await ex.join("t", tid, took["run_id"])
        gate_task.cancel()
        assert (await ex.run("t", tid, slow["run_id"])).status == "interrupted"
        assert texts(values)[-2:] == ["q6", "answer 4"]


async def _events_and_debug_stream_modes(url: str) -> None:
    tid = f"th-{uuid.uuid4().hex[:8]}"
    async for ex in opened(url, script("streamed")):
        await ex.create_thread("t", tid)
        run = await ex.create_run("t", tid, {"assistant_id": "chat", "input": ask("q"),
                                             "stream_mode": ["events", "debug", "values"]})
        await ex.join("t", tid, run["run_id"])
        got = [e async for e in ex.events("t", tid, run["run_id"]) if e is not None]
        kinds = {e.event for e in got}
        assert kinds == {"metadata", "events", "debug", "values"}, kinds
        events = [e.data["event"] for e in got if e.event == "events"]
        assert events[0] == "on_chain_start" and events[-1] == "on_chain_end"
        assert "on_chat_model_start" in events and "on_chat_model_end" in events
        debug = [e.data["type"] for e in got if e.event == "debug"]
        assert {"checkpoint", "task", "task_result"} <= set(debug)
        values = [e.data for e in got if e.event == "values"]
        assert texts(values[-1]) == ["q", "streamed"]


def test_assistants_graph_and_schemas() -> None:
    from granikv_agents.graphs import team_graph

    graph = team_graph(APPROVE)
    drawn = graph_view(graph, False)
    assert {n["id"] for n in drawn["nodes"]} == {"__start__", "draft", "review", "__end__"}
    assert {"source": "__start__", "target": "draft"} in drawn["edges"]
    schemas = schemas_view("approve", graph)
    assert schemas["graph_id"] == "approve"
    assert {"messages", "approved"} <= set(schemas["input_schema"]["properties"])
    assert "approved" in schemas["state_schema"]["properties"]
    assert schemas["context_schema"] is None


def test_history_update_copy_delete(store_url: str) -> None:
    asyncio.run(_history_update_copy_delete(store_url))


def test_malformed_input_never_reaches_the_thread(store_url: str) -> None:
    asyncio.run(_malformed_input_never_reaches_the_thread(store_url))


def test_thread_ids_are_scoped_by_team(store_url: str) -> None:
    asyncio.run(_thread_ids_are_scoped_by_team(store_url))


def test_interrupt_before_and_multitask(store_url: str) -> None:
    asyncio.run(_interrupt_before_and_multitask(store_url))


def test_events_and_debug_stream_modes(store_url: str) -> None:
    asyncio.run(_events_and_debug_stream_modes(store_url))


async def _if_not_exists_creates_only_a_valid_run(url: str) -> None:
    tid = f"th-{uuid.uuid4().hex[:8]}"
    async for ex in opened(url, script("made")):
        body = {"assistant_id": "chat", "input": ask("hi"), "if_not_exists": "create"}
        for bad in ({**body, "assistant_id": "nobody"}, {**body, "input": {"nope": 1}}):
            with pytest.raises((NotFound, ValueError)):
                await ex.create_run("t", tid, bad)
            with pytest.raises(NotFound):
                await ex.get_thread("t", tid)  # a refused run made no thread
        assert texts(await run_to_end(ex, "t", tid, body)) == ["hi", "made"]


def test_if_not_exists_creates_only_a_valid_run(store_url: str) -> None:
    asyncio.run(_if_not_exists_creates_only_a_valid_run(store_url))
