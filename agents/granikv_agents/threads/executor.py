"""ThreadExecutor: LangGraph Server's threads and runs for the teams of one app.

A thread is a LangGraph checkpoint thread owned by one team; its checkpoints carry the
conversation from run to run. A run executes one assistant (a team spec: its own graph
or a built-in shape) on a thread as an asyncio task, with ``durability="sync"``, and
records what it streams (``ThreadStore`` events: a reconnecting client resumes after
its ``Last-Event-ID``). A graph that calls ``interrupt()`` ends its run with the thread
``interrupted``; a run with ``command={"resume": ...}`` continues it, from the
checkpoint, so also on an executor opened after a restart. Runs that an executor left
unfinished (it stopped or died) are resumed by the next one (``auto_resume``).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import aclosing, asynccontextmanager, suppress
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver

from granikv_agents.checkpointers import open_checkpointer
from granikv_agents.database import open_database
from granikv_agents.follow import follow
from granikv_agents.graph import RunContext
from granikv_agents.graphs import team_graph
from granikv_agents.team import Team
from granikv_agents.threads.store import (
    DONE,
    RunStatus,
    StreamEvent,
    ThreadRecord,
    ThreadRun,
    ThreadStore,
)
from granikv_agents.threads.views import run_view, thread_view
from granikv_agents.threads.wire import command, jsonable, state_view, stream_modes

logger = logging.getLogger(__name__)
Assistants = Callable[[str], Mapping[str, Team]]  # team -> assistant id -> its Team
ContextOf = Callable[[Team], RunContext]  # a run's runtime context (backend, model)


class ThreadError(Exception):
    status = 400


class NotFound(ThreadError):
    status = 404


class Forbidden(ThreadError):
    status = 403


class Conflict(ThreadError):
    status = 409


class ThreadExecutor:
    def __init__(self, store: ThreadStore, saver: BaseCheckpointSaver[Any],
                 assistants: Assistants, context_of: ContextOf) -> None:
        self.store = store
        self.saver = saver
        self.assistants = assistants
        self.context_of = context_of
        self._tasks: dict[str, asyncio.Task[None]] = {}  # run id -> its task
        self._busy: dict[str, str] = {}  # thread id -> its running run
        self._wake = asyncio.Condition()
        self._stopping = False

    @classmethod
    @asynccontextmanager
    async def open(cls, url: str, assistants: Assistants, context_of: ContextOf,
                   auto_resume: bool = True) -> AsyncIterator[ThreadExecutor]:
        """``url``: a SQLite file or a ``postgresql://`` database (store + checkpoints)."""
        db = await open_database(url)
        try:
            async with open_checkpointer(url) as saver:
                ex = cls(await ThreadStore.open(db), saver, assistants, context_of)
                try:
                    await ex._recover(auto_resume)
                    yield ex
                finally:
                    await ex.stop()
        finally:
            await db.close()

    # ---- assistants and threads -------------------------------------------------------
    def assistant(self, team: str, assistant_id: str) -> Team:
        found = self.assistants(team).get(assistant_id)
        if found is None:
            raise NotFound(f"team {team!r} has no assistant {assistant_id!r}")
        return found

    async def create_thread(self, team: str, thread_id: str | None = None,
                            metadata: dict[str, Any] | None = None,
                            if_exists: str = "raise") -> dict[str, Any]:
        tid = thread_id or str(uuid.uuid4())
        rec = await self.store.create_thread(tid, team, metadata or {})
        if rec is None:
            old = await self.thread(team, tid)
            if if_exists != "do_nothing":
                raise Conflict(f"thread {tid!r} exists")
            rec = old
        return thread_view(rec, {})

    async def thread(self, team: str, thread_id: str) -> ThreadRecord:
        rec = await self.store.thread(thread_id)
        if rec is None:
            raise NotFound(f"no thread {thread_id!r}")
        if rec.team != team:
            raise Forbidden(f"thread {thread_id!r} belongs to another team")
        return rec

    async def get_thread(self, team: str, thread_id: str) -> dict[str, Any]:
        rec = await self.thread(team, thread_id)
        return thread_view(rec, (await self.state(team, thread_id))["values"])

    async def state(self, team: str, thread_id: str) -> dict[str, Any]:
        rec = await self.thread(team, thread_id)
        if rec.assistant_id is None:
            return {"values": {}, "next": [], "tasks": [], "interrupts": [],
                    "checkpoint": None, "metadata": {}, "created_at": None}
        graph = team_graph(self.assistant(team, rec.assistant_id), self.saver)
        return state_view(await graph.aget_state(_config(thread_id)))

    async def search_threads(self, team: str, limit: int = 10,
                             offset: int = 0) -> list[dict[str, Any]]:
        return [thread_view(t, {}) for t in await self.store.search_threads(team, limit, offset)]

    # ---- runs -------------------------------------------------------------------------
    async def create_run(self, team: str, thread_id: str, body: Mapping[str, Any]
                         ) -> dict[str, Any]:
        thread = await self.thread(team, thread_id)
        assistant_id = str(body.get("assistant_id") or "")
        spec_team = self.assistant(team, assistant_id)
        if thread_id in self._busy:
            raise Conflict(f"thread {thread_id!r} is busy with run {self._busy[thread_id]}")
        kwargs = {"input": body.get("input"), "command": body.get("command"),
                  "stream_mode": stream_modes(body.get("stream_mode"))}
        run = await self.store.create_run(str(uuid.uuid4()), thread, assistant_id,
                                          dict(body.get("metadata") or {}), kwargs)
        await self.store.set_thread(thread_id, "busy", assistant_id)
        self._launch(run, spec_team, resumed=False)
        return run_view(run)

    async def run(self, team: str, thread_id: str, run_id: str) -> ThreadRun:
        await self.thread(team, thread_id)
        run = await self.store.run(run_id)
        if run is None or run.thread_id != thread_id:
            raise NotFound(f"thread {thread_id!r} has no run {run_id!r}")
        return run

    async def list_runs(self, team: str, thread_id: str, limit: int = 10, offset: int = 0,
                        status: str | None = None) -> list[dict[str, Any]]:
        await self.thread(team, thread_id)
        return [run_view(r) for r in await self.store.list_runs(thread_id, limit, offset,
                                                                status)]

    async def join(self, team: str, thread_id: str, run_id: str) -> dict[str, Any]:
        """Wait for the run; the thread's values after it."""
        await self.run(team, thread_id, run_id)
        task = self._tasks.get(run_id)
        if task is not None:
            with suppress(asyncio.CancelledError):
                await asyncio.shield(task)
        return dict((await self.state(team, thread_id))["values"])

    async def cancel(self, team: str, thread_id: str, run_id: str, wait: bool = False) -> None:
        run = await self.run(team, thread_id, run_id)
        task = self._tasks.get(run_id)
        if task is None:
            if run.status in DONE:
                raise Conflict(f"run {run_id!r} is {run.status}")
            return
        task.cancel()
        if wait:
            await asyncio.gather(task, return_exceptions=True)

    async def events(self, team: str, thread_id: str, run_id: str, after: int = 0,
                     ping_s: float = 15.0) -> AsyncIterator[StreamEvent | None]:
        """The run's events after ``after``, then live ones until it ends; None is a
        keep-alive ping (nothing new for ``ping_s``)."""
        await self.run(team, thread_id, run_id)
        async for ev in follow(self.store, run_id, after, lambda: run_id in self._tasks,
                               self._wake, ping_s):
            yield ev

    async def stop(self) -> None:
        """Cancel the runs in flight; they stay pending and the next executor resumes
        them from their checkpoints."""
        self._stopping = True
        tasks = list(self._tasks.values())
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # ---- internals --------------------------------------------------------------------
    def _launch(self, run: ThreadRun, team: Team, resumed: bool) -> None:
        self._busy[run.thread_id] = run.run_id
        self._tasks[run.run_id] = asyncio.create_task(self._drive(run, team, resumed),
                                                      name=f"granikv-thread-run-{run.run_id}")

    async def _drive(self, run: ThreadRun, team: Team, resumed: bool) -> None:
        config = _config(run.thread_id)
        graph = team_graph(team, self.saver)
        ctx = self.context_of(team)
        try:
            await self.store.set_run(run.run_id, "running")
            await self._event(run.run_id, "metadata", {"run_id": run.run_id,
                                                       "resumed": resumed})
            payload = await self._payload(run, team, graph, config, resumed)
            async with aclosing(graph.astream(  # type: ignore[type-var]
                    payload, config, context=ctx, stream_mode=run.kwargs["stream_mode"],
                    durability="sync")) as stream:
                async for mode, chunk in stream:
                    await self._event(run.run_id, mode, jsonable(chunk))
            snap = await graph.aget_state(config)
            await self.store.set_run(run.run_id, "success")
            await self.store.set_thread(run.thread_id,
                                        "interrupted" if snap.interrupts else "idle")
        except asyncio.CancelledError:
            status: RunStatus = "pending" if self._stopping else "interrupted"
            await self.store.set_run(run.run_id, status, "cancelled")
            await self.store.set_thread(run.thread_id, "idle")
            raise
        except Exception as e:
            logger.exception("GraniKV: thread run %s failed", run.run_id)
            await self.store.set_run(run.run_id, "error", f"{type(e).__name__}: {e}")
            await self._event(run.run_id, "error", {"error": type(e).__name__,
                                                    "message": str(e)})
            await self.store.set_thread(run.thread_id, "error")
        finally:
            self._tasks.pop(run.run_id, None)
            self._busy.pop(run.thread_id, None)
            await ctx.backend.aclose()
            await self._notify()

    async def _payload(self, run: ThreadRun, team: Team, graph: Any,
                       config: RunnableConfig, resumed: bool) -> Any:
        """What the graph is invoked with: the command, else the input. A resumed run
        continues from its checkpoint (None) when that has work left."""
        if resumed and (await graph.aget_state(config)).next:
            return None
        cmd = command(run.kwargs.get("command"))
        if cmd is not None:
            return cmd
        if run.kwargs.get("input") is None and team.graph is None:
            return {"task": team.task}  # a built-in shape starts from its task
        return run.kwargs.get("input")

    async def _recover(self, auto_resume: bool) -> None:
        for run in await self.store.runs_with_status(frozenset({"pending", "running"})):
            team = self.assistants(run.team).get(run.assistant_id)
            if not auto_resume or team is None:
                await self.store.set_run(run.run_id, "interrupted", "the executor stopped")
                await self.store.set_thread(run.thread_id, "idle")
                continue
            self._launch(run, team, resumed=True)

    async def _event(self, run_id: str, event: str, data: Any) -> None:
        await self.store.add_event(run_id, event, data)
        await self._notify()

    async def _notify(self) -> None:
        async with self._wake:
            self._wake.notify_all()


def _config(thread_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id}, "recursion_limit": 100}
