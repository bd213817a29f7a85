"""RunExecutor: starts, resumes and watches team runs, checkpointed in one database (a
SQLite file or Postgres).

A run is a LangGraph thread (run id = thread id) checkpointed by LangGraph's
``AsyncSqliteSaver`` or ``AsyncPostgresSaver`` with ``durability="sync"``: every
finished agent turn is saved as a pending write of its superstep, so a resumed run
re-executes only the turns that had not finished. A turn is reported (its event) only
once its write is saved (``checkpointers.FlushedWrites.flush``), so a reported turn never
runs again; a turn saved by an executor that died before reporting it is reported
(``recovered``) when the run resumes. The executor owns the store (one writer) and
keeps, per run, the asyncio task that drives it (``owner.py``: a second executor on the
same store waits, then fails). Opening an
executor marks the runs a previous one left "running" as "interrupted" (it died
mid-run); ``recover()`` resumes them from their checkpoints.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing, asynccontextmanager
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.errors import GraphDrained
from langgraph.runtime import RunControl

from granikv_agents.binding import LLMCallError, TeamBackend, TransientLLMError
from granikv_agents.checkpointers import FlushedWrites, open_checkpointer
from granikv_agents.events import unreported_events, update_events
from granikv_agents.follow import follow
from granikv_agents.graph import RetryConfig, RunContext, build_graph
from granikv_agents.owner import StoreOwner
from granikv_agents.spec import TeamSpec
from granikv_agents.store import RESUMABLE, RunEvent, RunRecord, RunStore, Status
from granikv_agents.team import Team

Bind = Callable[[Team], TeamBackend]
logger = logging.getLogger(__name__)


class RunNotFound(KeyError):
    status = 404


class RunConflict(Exception):
    status = 409


class RunExecutor:
    def __init__(self, store: RunStore, saver: FlushedWrites, bind: Bind,
                 retry: RetryConfig | None = None) -> None:
        self.store = store
        self.saver = saver
        self.bind = bind
        self.retry = retry or RetryConfig()
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._controls: dict[str, RunControl] = {}
        self._wake = asyncio.Condition()

    @classmethod
    @asynccontextmanager
    async def open(cls, url: str, bind: Bind, retry: RetryConfig | None = None,
                   drain_s: float = 10.0) -> AsyncIterator[RunExecutor]:
        """``url``: a SQLite file or a ``postgresql://`` database (runs + checkpoints)."""
        owner = await StoreOwner.acquire(url)  # one executor per store
        try:
            store = await RunStore.open(url)
            try:
                async with open_checkpointer(url) as saver:
                    ex = cls(store, saver, bind, retry)
                    try:
                        await ex._orphans()
                        yield ex
                    finally:
                        await ex.stop(drain_s)
            finally:
                await store.close()
        finally:
            await owner.release()

    # ---- runs ---------------------------------------------------------------------------
    async def start(self, spec: TeamSpec, task: str | None = None) -> RunRecord:
        team = spec.to_team(task)
        rec = await self.store.create(f"run-{uuid.uuid4().hex[:16]}", spec.team,
                                      spec.model_dump_json(), team.task)
        await self._event(rec.run_id, "status", {"status": "running", "attempt": 1})
        self._launch(rec.run_id, team)
        return rec

    async def resume(self, run_id: str) -> RunRecord:
        rec = await self.record(run_id)
        if run_id in self._tasks:
            raise RunConflict(f"run {run_id} is running")
        if rec.status not in RESUMABLE:
            raise RunConflict(f"run {run_id} is {rec.status}; only failed or interrupted "
                              "runs resume")
        # No await between the check above and the launch: two resumes cannot both pass.
        self._launch(run_id, team_of(rec), resumed=rec.attempts + 1)
        return dataclasses.replace(rec, status="running", error=None, attempts=rec.attempts + 1)

    async def recover(self) -> list[str]:
        """Resume every interrupted run (those a stopped or dead executor left)."""
        runs = await self.store.list_runs(statuses=frozenset({"interrupted"}))
        for rec in runs:
            await self.resume(rec.run_id)
        return [r.run_id for r in runs]

    async def record(self, run_id: str, team: str | None = None) -> RunRecord:
        """The run (of ``team``, when given: another team's run is not found)."""
        rec = await self.store.get(run_id, team)
        if rec is None:
            raise RunNotFound(f"no run {run_id!r}")
        return rec

    async def wait(self, run_id: str, timeout_s: float | None = None) -> RunRecord:
        task = self._tasks.get(run_id)
        if task is not None:
            await asyncio.wait_for(asyncio.shield(task), timeout_s)
        return await self.record(run_id)

    async def view(self, run_id: str) -> dict[str, Any]:
        """Status and results, from the store and the run's latest checkpoint. Its
        values include the turns finished in a superstep that did not complete: LangGraph
        applies the saved writes of the finished tasks when it reads a state."""
        rec = await self.record(run_id)
        team = team_of(rec)
        snap = await build_graph(team).compile(checkpointer=self.saver).aget_state(
            self._config(run_id, team))
        values: dict[str, Any] = dict(snap.values or {})
        return {**rec.view(), "round": values.get("round"), "result": values.get("result"),
                "context": values.get("context"), "context_after": values.get("context_after"),
                "turns": values.get("turns", []), "next": list(snap.next),
                "calls_per_run": team.calls_per_run()}

    async def events(self, run_id: str, after: int = 0) -> AsyncIterator[RunEvent]:
        """The run's events after ``after``, then new ones live until it stops."""
        await self.record(run_id)
        async for ev in follow(self.store, run_id, after, lambda: run_id in self._tasks,
                               self._wake, 1.0):
            if ev is not None:
                yield ev

    async def stop(self, drain_s: float) -> None:
        """Stop at the next superstep boundary (the turns in flight finish and are saved);
        after ``drain_s`` cancel what is left. Stopped runs are 'interrupted'."""
        for control in self._controls.values():
            control.request_drain("executor stopping")
        tasks = list(self._tasks.values())
        if tasks:
            _, late = await asyncio.wait(tasks, timeout=drain_s)
            for t in late:
                t.cancel()
            await asyncio.gather(*late, return_exceptions=True)

    # ---- internals --------------------------------------------------------------------
    def _launch(self, run_id: str, team: Team, resumed: int = 0) -> None:
        self._controls[run_id] = RunControl()
        self._tasks[run_id] = asyncio.create_task(self._drive(run_id, team, resumed),
                                                  name=f"granikv-run-{run_id}")

    async def _drive(self, run_id: str, team: Team, resumed: int) -> None:
        """Run (or resume: ``resumed`` = this attempt's number) until the graph ends,
        fails or is stopped, recording its events and status."""
        config = self._config(run_id, team)
        graph = build_graph(team, self.retry).compile(checkpointer=self.saver)
        control = self._controls[run_id]
        backend = self.bind(team)
        try:
            fresh = await self.saver.aget_tuple(config) is None
            if resumed:
                if not fresh:
                    await self._report_saved(run_id, graph, config)
                await self.store.set_status(run_id, "running", resumed=True)
                await self._event(run_id, "status", {"status": "resumed", "attempt": resumed})
            if not fresh:
                await self._check_pin(run_id, team, backend, graph, config)
            # aclosing: if reporting fails, the stream is closed at once (LangGraph stops
            # its in-flight tasks) instead of lingering until garbage collection.
            async with aclosing(graph.astream(  # type: ignore[type-var]  # an async generator
                    {"task": team.task} if fresh else None, config,
                    context=RunContext.of(team, backend), stream_mode="updates",
                    durability="sync", control=control)) as stream:
                async for chunk in stream:
                    await self.saver.flush()  # what is reported is in the checkpoint
                    for type_, data in update_events(chunk):
                        await self._event(run_id, type_, data)
            await self._finish(run_id, "succeeded")
        except GraphDrained as e:
            await self._finish(run_id, "interrupted", f"stopped: {e.reason}")
        except asyncio.CancelledError:
            await self._finish(run_id, "interrupted", "cancelled")
            raise
        except Exception as e:  # a turn failed for good (or retries ran out)
            logger.warning("run %s of team %s failed", run_id, team.name, exc_info=True)
            await self._finish(run_id, "failed", public_error(e))
        finally:
            self._tasks.pop(run_id, None)
            self._controls.pop(run_id, None)
            await backend.aclose()
            await self._notify()

    async def _report_saved(self, run_id: str, graph: Any, config: RunnableConfig) -> None:
        """Log what the checkpoint holds and the log lacks (the previous executor died
        between saving and reporting it), before the "resumed" status: it belongs to the
        previous attempt, and the resumed graph will not run it again."""
        values = (await graph.aget_state(config)).values or {}
        logged = [e.view() for e in await self.store.events(run_id, 0)]
        for type_, data in unreported_events(values, logged):
            await self._event(run_id, type_, data)

    async def _check_pin(self, run_id: str, team: Team, backend: TeamBackend, graph: Any,
                         config: RunnableConfig) -> None:
        """Before resuming: the team context the run pinned must still be the team's.
        A platform that lost it (a new cluster) gets it pinned again (the same text
        gives the same prefix id); a team whose context was replaced since is a 409."""
        pinned = (await graph.aget_state(config)).values.get("context")
        if pinned is None:
            return  # register_context has not run yet: the graph will pin it
        current = await backend.read_context()
        if current is None:
            current = await backend.pin_context(team.context)
        if current["prefix_id"] != pinned["prefix_id"]:
            raise LLMCallError(409, f"team {team.name!r} has another context "
                               f"({current['prefix_id']}) than the run's "
                               f"({pinned['prefix_id']}); start a new run")
        await self._event(run_id, "context", {"when": "resume", **current})

    async def _finish(self, run_id: str, status: Status, error: str | None = None) -> None:
        await self.store.set_status(run_id, status, error)
        await self._event(run_id, "status", {"status": status, "error": error})

    async def _orphans(self) -> None:
        """Runs left 'running' by a previous executor of this file did not finish: it
        died. They resume from their checkpoints (``recover`` or POST .../resume)."""
        for rec in await self.store.list_runs(statuses=frozenset({"running"})):
            await self._finish(rec.run_id, "interrupted", "the executor stopped mid-run")

    async def _event(self, run_id: str, type_: str, data: dict[str, Any]) -> None:
        await self.store.add_event(run_id, type_, data)
        await self._notify()

    async def _notify(self) -> None:
        async with self._wake:
            self._wake.notify_all()

    @staticmethod
    def _config(run_id: str, team: Team) -> RunnableConfig:
        return {"configurable": {"thread_id": run_id},
                "recursion_limit": team.recursion_limit()}


def public_error(e: BaseException) -> str:
    """A failed run's error as its team reads it: a call the platform refused, as the
    platform answered it (its answers are written for teams); of anything else, what
    failed but not its details (a replica's pid, node address or actor id, a path),
    which go to the service's log."""
    if isinstance(e, TransientLLMError):
        return (f"{type(e).__name__}: {e.status}: the LLM replicas did not answer, "
                "retries included; resume the run when they are back")
    if isinstance(e, LLMCallError):
        return f"{type(e).__name__}: {e}"
    return f"{type(e).__name__} in the team's graph (the details are in the service's log)"


def team_of(rec: RunRecord) -> Team:
    """The team a stored run runs (its spec was stored with the context inline)."""
    return TeamSpec.model_validate_json(rec.spec).to_team(rec.task)
