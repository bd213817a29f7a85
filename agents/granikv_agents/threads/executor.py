"""ThreadExecutor: LangGraph Server's threads and runs for the teams of one app.

A thread is a LangGraph checkpoint thread owned by one team (its id is the team's: another
team's thread is absent, 404); its checkpoints carry the conversation from run to run, and
its history, state updates and copies are LangGraph's (``aget_state_history``,
``aupdate_state``, the saver's checkpoints). A run executes one assistant (a team spec:
its own graph or a built-in shape) on a thread as an asyncio task, with ``durability="sync"``, and
records what it streams (``ThreadStore`` events: a reconnecting client resumes after
its ``Last-Event-ID``). A graph that calls ``interrupt()`` ends its run with the thread
``interrupted``; a run with ``command={"resume": ...}`` continues it, from the
checkpoint, so also on an executor opened after a restart. Runs that an executor left
unfinished (it stopped or died) are resumed by the next one (``auto_resume``). One run
runs per thread at a time; runs enqueued behind it run in order.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager, suppress
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.pregel import Pregel

from granikv_agents.checkpointers import copy_checkpoints, open_checkpointer
from granikv_agents.follow import follow
from granikv_agents.graph import RunContext
from granikv_agents.graphs import team_graph
from granikv_agents.team import Team
from granikv_agents.threads.checkpoints import config_of, read_history, read_state, write_state
from granikv_agents.threads.fit import PromptFit, new_messages, prompt_messages
from granikv_agents.threads.options import run_kwargs
from granikv_agents.threads.slots import RunSlots
from granikv_agents.threads.store import (
    DONE,
    RunStatus,
    StreamEvent,
    ThreadRecord,
    ThreadRun,
    ThreadStore,
    checkpoint_thread,
)
from granikv_agents.threads.streaming import RunStream
from granikv_agents.threads.views import run_view, thread_view
from granikv_agents.threads.wire import command, jsonable, with_thread_id
from granikv_platform.database import open_database

logger = logging.getLogger(__name__)
Assistants = Callable[[str], Mapping[str, Team]]  # team -> assistant id -> its Team
ContextOf = Callable[[Team], RunContext]  # a run's runtime context (backend, model)


class ThreadError(Exception):
    status = 400


class NotFound(ThreadError):
    """Absent, or another team's: the two are not told apart."""

    status = 404


class Conflict(ThreadError):
    status = 409


class TooLong(ThreadError):
    """The run's messages cannot fit the model: refused before anything is stored."""

    status = 400


class ThreadExecutor:
    def __init__(self, store: ThreadStore, saver: BaseCheckpointSaver[Any],
                 assistants: Assistants, context_of: ContextOf,
                 fit: PromptFit | None = None) -> None:
        self.store = store
        self.saver = saver
        self.assistants = assistants
        self.context_of = context_of
        self.fit = fit  # None: a run's length is not checked before it is stored
        self.slots = RunSlots(self._drive)
        self._wake = asyncio.Condition()
        self._stopping = False

    @classmethod
    @asynccontextmanager
    async def open(cls, url: str, assistants: Assistants, context_of: ContextOf,
                   auto_resume: bool = True, fit: PromptFit | None = None
                   ) -> AsyncIterator[ThreadExecutor]:
        """``url``: a SQLite file or a ``postgresql://`` database (store + checkpoints);
        ``fit``: the model's length check of a run's messages (``threads/fit.py``)."""
        db = await open_database(url)
        try:
            async with open_checkpointer(url) as saver:
                ex = cls(await ThreadStore.open(db, saver), saver, assistants, context_of,
                         fit)
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

    def graph(self, team: str, assistant_id: str) -> Pregel[Any, Any, Any, Any]:
        return team_graph(self.assistant(team, assistant_id), self.saver)

    async def create_thread(self, team: str, thread_id: str | None = None,
                            metadata: dict[str, Any] | None = None,
                            if_exists: str = "raise") -> dict[str, Any]:
        tid = thread_id or str(uuid.uuid4())
        rec = await self.store.create_thread(tid, team, metadata or {})
        if rec is None:
            if if_exists != "do_nothing":
                raise Conflict(f"thread {tid!r} exists")
            rec = await self.thread(team, tid)
        return thread_view(rec, {})

    async def thread(self, team: str, thread_id: str) -> ThreadRecord:
        rec = await self.store.thread(team, thread_id)
        if rec is None:
            raise NotFound(f"team {team!r} has no thread {thread_id!r}")
        return rec

    async def get_thread(self, team: str, thread_id: str) -> dict[str, Any]:
        rec = await self.thread(team, thread_id)
        return thread_view(rec, (await self.state(team, thread_id))["values"])

    async def state(self, team: str, thread_id: str,
                    checkpoint_id: str | None = None) -> dict[str, Any]:
        rec = await self.thread(team, thread_id)
        if rec.assistant_id is None:
            return {"values": {}, "next": [], "tasks": [], "interrupts": [],
                    "checkpoint": None, "metadata": {}, "created_at": None}
        found = await read_state(self.graph(team, rec.assistant_id), rec.checkpoint_thread,
                                 thread_id, checkpoint_id)
        if found is None:
            raise NotFound(f"thread {thread_id!r} has no checkpoint {checkpoint_id!r}")
        return found

    async def history(self, team: str, thread_id: str, limit: int = 10,
                      before: str | None = None, metadata: dict[str, Any] | None = None,
                      checkpoint_id: str | None = None) -> list[dict[str, Any]]:
        """The thread's checkpoints, newest first (``before``: older than that one)."""
        rec = await self.thread(team, thread_id)
        if rec.assistant_id is None:
            return []
        return await read_history(self.graph(team, rec.assistant_id), rec.checkpoint_thread,
                                  thread_id, limit, before, metadata, checkpoint_id)

    async def update_state(self, team: str, thread_id: str, values: Any,
                           as_node: str | None = None,
                           checkpoint_id: str | None = None) -> dict[str, Any]:
        """A new checkpoint with ``values`` applied as if ``as_node`` wrote them."""
        rec = await self.thread(team, thread_id)
        if rec.assistant_id is None:
            raise Conflict(f"thread {thread_id!r} has no runs yet: its graph is not known "
                           "(run an assistant on it first)")
        async with self.slots.admission(rec.checkpoint_thread):  # no run starts meanwhile
            self._idle(rec)
            ref, pending = await write_state(self.graph(team, rec.assistant_id),
                                             rec.checkpoint_thread, thread_id, values,
                                             as_node, checkpoint_id)
            await self.store.set_thread(team, thread_id,
                                        "interrupted" if pending else "idle")
        return ref

    async def update_thread(self, team: str, thread_id: str,
                            metadata: dict[str, Any]) -> dict[str, Any]:
        """Merge ``metadata`` into the thread's."""
        rec = await self.thread(team, thread_id)
        merged = await self.store.set_metadata(team, thread_id, {**rec.metadata, **metadata})
        if merged is None:
            raise NotFound(f"team {team!r} has no thread {thread_id!r}")
        return thread_view(merged, {})

    async def copy_thread(self, team: str, thread_id: str) -> dict[str, Any]:
        """A new thread (a generated id) with this one's metadata and checkpoints."""
        rec = await self.thread(team, thread_id)
        status = "idle" if rec.status == "busy" else rec.status
        new = await self.store.create_thread(str(uuid.uuid4()), team, rec.metadata,
                                             rec.assistant_id, status)
        assert new is not None  # a fresh uuid
        await copy_checkpoints(self.saver, rec.checkpoint_thread, new.checkpoint_thread)
        return thread_view(new, {})

    async def delete_thread(self, team: str, thread_id: str) -> None:
        """The thread, its runs (the one in flight and the queued ones are cancelled)
        and its checkpoints."""
        rec = await self.thread(team, thread_id)
        key = rec.checkpoint_thread
        async with self.slots.admission(key):
            running = self.slots.running(key)
            if running is not None:
                await self._interrupt_thread(key, running, "thread deleted")
            await self.store.delete_thread(team, thread_id)
            await self.saver.adelete_thread(key)

    async def search_threads(self, team: str, limit: int = 10,
                             offset: int = 0) -> list[dict[str, Any]]:
        return [thread_view(t, {}) for t in await self.store.search_threads(team, limit, offset)]

    # ---- runs -------------------------------------------------------------------------
    async def create_run(self, team: str, thread_id: str, body: Mapping[str, Any]
                         ) -> dict[str, Any]:
        """A run of ``body["assistant_id"]``, checked before anything is stored (its
        options, and its messages against the model's length: ``fit``). On a busy
        thread, ``multitask_strategy`` says: ``reject`` (409), ``enqueue`` (it runs when
        the runs before it are done) or ``interrupt`` (the running run and the queued
        ones end ``interrupted``, then this one runs). Admission is atomic per thread:
        the slot is read, the run stored and submitted under the thread's lock."""
        assistant_id = str(body.get("assistant_id") or "")
        spec_team = self.assistant(team, assistant_id)
        graph = team_graph(spec_team, self.saver)
        kwargs = run_kwargs(graph, body)
        thread = await self._run_thread(team, thread_id, body)
        if self.fit is not None:
            await self._check_fit(spec_team, graph, thread, kwargs)
        key = thread.checkpoint_thread
        async with self.slots.admission(key):
            running = self.slots.running(key)
            strategy = kwargs["multitask_strategy"]
            if running is not None and strategy == "reject":
                raise Conflict(f"thread {thread_id!r} is busy with run {running} (send "
                               "multitask_strategy 'enqueue' or 'interrupt')")
            if running is not None and strategy == "interrupt":
                await self._interrupt_thread(key, running)
            run = await self.store.create_run(str(uuid.uuid4()), thread, assistant_id,
                                              dict(body.get("metadata") or {}), kwargs)
            await self.store.set_thread(team, thread_id, "busy", assistant_id)
            self.slots.submit(run, spec_team, resumed=False)
        return run_view(run)

    async def _run_thread(self, team: str, thread_id: str,
                          body: Mapping[str, Any]) -> ThreadRecord:
        if body.get("if_not_exists") == "create":
            await self.store.create_thread(thread_id, team, {})
        return await self.thread(team, thread_id)

    async def run(self, team: str, thread_id: str, run_id: str) -> ThreadRun:
        await self.thread(team, thread_id)
        run = await self.store.run(run_id)
        if run is None or run.team != team or run.thread_id != thread_id:
            raise NotFound(f"thread {thread_id!r} has no run {run_id!r}")
        return run

    async def list_runs(self, team: str, thread_id: str, limit: int = 10, offset: int = 0,
                        status: str | None = None) -> list[dict[str, Any]]:
        await self.thread(team, thread_id)
        return [run_view(r) for r in await self.store.list_runs(team, thread_id, limit,
                                                                offset, status)]

    async def join(self, team: str, thread_id: str, run_id: str) -> dict[str, Any]:
        """Wait for the run (a queued one: until it ran); the thread's values after it,
        or, for a run that failed, LangGraph Server's ``{"__error__": {"error",
        "message"}}`` (the SDK's ``runs.wait`` raises on it)."""
        await self.run(team, thread_id, run_id)
        while self.slots.live(run_id):
            task = self.slots.task(run_id)
            if task is not None:
                with suppress(asyncio.CancelledError):
                    await asyncio.shield(task)
                continue
            async with self._wake:
                with suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), 1.0)
        ended = await self.run(team, thread_id, run_id)
        if ended.status == "error":
            return {"__error__": await self._failure(ended)}
        return dict((await self.state(team, thread_id))["values"])

    async def cancel(self, team: str, thread_id: str, run_id: str, wait: bool = False) -> None:
        """Interrupt the run (idempotent: a run being or already interrupted stays so,
        and ``wait`` waits for its end); a queued run leaves the queue unrun. A run that
        succeeded or failed is a 409."""
        run = await self.run(team, thread_id, run_id)
        task = self.slots.interrupt(run_id)
        if task is None:
            if self.slots.unqueue(run):
                await self.store.set_run(run_id, "interrupted", "cancelled")
                await self._notify()
            elif run.status in DONE and run.status != "interrupted":
                raise Conflict(f"run {run_id!r} is {run.status}")
            return
        if wait:
            await asyncio.gather(task, return_exceptions=True)

    async def events(self, team: str, thread_id: str, run_id: str, after: int = 0,
                     ping_s: float = 15.0) -> AsyncIterator[StreamEvent | None]:
        """The run's events after ``after``, then live ones until it ends; None is a
        keep-alive ping (nothing new for ``ping_s``)."""
        await self.run(team, thread_id, run_id)
        async for ev in follow(self.store, run_id, after, lambda: self.slots.live(run_id),
                               self._wake, ping_s):
            yield ev

    async def stop(self) -> None:
        """Cancel the runs in flight; they stay pending and the next executor resumes
        them from their checkpoints (those a client interrupted end ``interrupted``)."""
        self._stopping = True
        await asyncio.gather(*self.slots.close(), return_exceptions=True)

    # ---- internals --------------------------------------------------------------------
    async def _interrupt_thread(self, key: str, running: str,
                                why: str = "cancelled") -> None:
        """The thread's queued runs and its running one end ``interrupted`` (as LangGraph
        Server's ``interrupt`` does to every run in flight on the thread); returns once
        the running one has ended. Called under the thread's admission lock."""
        for queued in self.slots.drop_queue(key):
            await self.store.set_run(queued.run_id, "interrupted", why)
        task = self.slots.interrupt(running)
        if task is not None:
            await asyncio.gather(task, return_exceptions=True)
        await self._notify()

    async def _check_fit(self, team: Team, graph: Pregel[Any, Any, Any, Any],
                         thread: ThreadRecord, kwargs: Mapping[str, Any]) -> None:
        """TooLong unless the run's messages, after the thread's (at its checkpoint),
        fit the model (``fit.prompt_messages`` says which messages are counted)."""
        assert self.fit is not None
        history: list[Any] = []
        if thread.assistant_id is not None:
            snap = await graph.aget_state(config_of(thread.checkpoint_thread,
                                                    kwargs.get("checkpoint_id")))
            history = list((snap.values or {}).get("messages") or [])
        why = await self.fit.problem(team, prompt_messages(team, history, new_messages(kwargs)))
        if why is not None:
            raise TooLong(why)

    async def _failure(self, run: ThreadRun) -> dict[str, Any]:
        """A failed run's error as its ``error`` event said it: ``{error, message}``."""
        for ev in reversed(await self.store.events(run.run_id)):
            if ev.event == "error" and isinstance(ev.data, dict):
                return dict(ev.data)
        kind, _, message = (run.error or "Error").partition(": ")
        return {"error": kind, "message": message}

    def _idle(self, rec: ThreadRecord) -> None:
        running = self.slots.running(rec.checkpoint_thread)
        if running is not None:
            raise Conflict(f"thread {rec.thread_id!r} is busy with run {running}")

    async def _drive(self, run: ThreadRun, team: Team, resumed: bool) -> None:
        key = checkpoint_thread(run.team, run.thread_id)
        config = config_of(key, run.kwargs.get("checkpoint_id"))
        graph = team_graph(team, self.saver)
        ctx = self.context_of(team)
        stream = RunStream(tuple(run.kwargs["stream_mode"]), run.kwargs.get("interrupt_before"),
                           run.kwargs.get("interrupt_after"))
        try:
            started = bool(await self.store.events(run.run_id))
            await self.store.set_run(run.run_id, "running")
            await self.store.set_thread(run.team, run.thread_id, "busy")  # a queued run too
            await self._event(run.run_id, "metadata", {"run_id": run.run_id,
                                                       "resumed": resumed and started})
            payload = await self._payload(run, team, graph, config, resumed and started)
            async for event, data in stream.chunks(graph, payload, config, ctx):
                await self._event(run.run_id, event,
                                  with_thread_id(jsonable(data), key, run.thread_id))
            snap = await graph.aget_state(config_of(key))
            await self.store.set_run(run.run_id, "success")
            await self.store.set_thread(run.team, run.thread_id,
                                        "interrupted" if snap.next else "idle")
        except asyncio.CancelledError:
            # Cancelled once (RunSlots.interrupt / close): these writes are not cut off.
            status: RunStatus = "pending" if self._stopping and not \
                self.slots.interrupted(run.run_id) else "interrupted"
            await self.store.set_run(run.run_id, status, "cancelled")
            await self.store.set_thread(run.team, run.thread_id, "idle")
            raise
        except Exception as e:
            logger.exception("GraniKV: thread run %s failed", run.run_id)
            await self.store.set_run(run.run_id, "error", f"{type(e).__name__}: {e}")
            await self._event(run.run_id, "error", {"error": type(e).__name__,
                                                    "message": str(e)})
            await self.store.set_thread(run.team, run.thread_id, "error")
        finally:
            self.slots.done(run)
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
        """Runs left pending or running (oldest first): resumed, one per thread at a
        time, the others queued behind it."""
        for run in await self.store.runs_with_status(frozenset({"pending", "running"})):
            team = self.assistants(run.team).get(run.assistant_id)
            if not auto_resume or team is None:
                await self.store.set_run(run.run_id, "interrupted", "the executor stopped")
                await self.store.set_thread(run.team, run.thread_id, "idle")
                continue
            self.slots.submit(run, team, resumed=True)

    async def _event(self, run_id: str, event: str, data: Any) -> None:
        await self.store.add_event(run_id, event, data)
        await self._notify()

    async def _notify(self) -> None:
        async with self._wake:
            self._wake.notify_all()

