"""ThreadStore: threads, their runs and the runs' stream events, beside the checkpoints.

A thread id is its team's: two teams may each have a thread ``t1``, and every lookup
names the team. The checkpoints hold a thread's state under the LangGraph thread id
``<team>/<thread id>`` (``ThreadRecord.checkpoint_thread``; team names have no ``/``);
this store adds what LangGraph Server shows besides: its status and metadata, each run's
status and options, and the ordered events a run streamed (so a client that reconnects
with ``Last-Event-ID`` gets the rest). Listing pages in SQL.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Literal

from granikv_agents.database import Database

RunStatus = Literal["pending", "running", "success", "error", "timeout", "interrupted"]
ThreadStatus = Literal["idle", "busy", "interrupted", "error"]
DONE: frozenset[str] = frozenset({"success", "error", "timeout", "interrupted"})

_SCHEMA = [
    "CREATE TABLE IF NOT EXISTS granikv_team_threads (thread_id TEXT NOT NULL, team TEXT NOT "
    "NULL, assistant_id TEXT, status TEXT NOT NULL, metadata TEXT NOT NULL, created_at "
    "DOUBLE PRECISION NOT NULL, updated_at DOUBLE PRECISION NOT NULL, "
    "PRIMARY KEY (team, thread_id))",
    "CREATE TABLE IF NOT EXISTS granikv_thread_runs (run_id TEXT PRIMARY KEY, thread_id TEXT "
    "NOT NULL, team TEXT NOT NULL, assistant_id TEXT NOT NULL, status TEXT NOT NULL, "
    "metadata TEXT NOT NULL, kwargs TEXT NOT NULL, error TEXT, created_at DOUBLE PRECISION "
    "NOT NULL, updated_at DOUBLE PRECISION NOT NULL)",
    "CREATE INDEX IF NOT EXISTS granikv_thread_runs_team_thread ON granikv_thread_runs "
    "(team, thread_id, created_at)",
    "CREATE INDEX IF NOT EXISTS granikv_thread_runs_status ON granikv_thread_runs (status)",
    "CREATE TABLE IF NOT EXISTS granikv_thread_events (run_id TEXT NOT NULL, seq INTEGER NOT "
    "NULL, event TEXT NOT NULL, data TEXT NOT NULL, PRIMARY KEY (run_id, seq))",
]
_THREAD = "thread_id, team, assistant_id, status, metadata, created_at, updated_at"
_RUN = ("run_id, thread_id, team, assistant_id, status, metadata, kwargs, error, "
        "created_at, updated_at")


@dataclass(frozen=True)
class ThreadRecord:
    thread_id: str
    team: str
    assistant_id: str | None  # the graph of its last run: its state is read with it
    status: ThreadStatus
    metadata: dict[str, Any]
    created_at: float
    updated_at: float

    @classmethod
    def of(cls, row: tuple[Any, ...]) -> ThreadRecord:
        return cls(row[0], row[1], row[2], row[3], json.loads(row[4]), row[5], row[6])

    @property
    def checkpoint_thread(self) -> str:
        """Its LangGraph thread id: the team's namespace, then the client's id."""
        return checkpoint_thread(self.team, self.thread_id)


def checkpoint_thread(team: str, thread_id: str) -> str:
    return f"{team}/{thread_id}"


@dataclass(frozen=True)
class ThreadRun:
    run_id: str
    thread_id: str
    team: str
    assistant_id: str
    status: RunStatus
    metadata: dict[str, Any]
    kwargs: dict[str, Any]  # input, command, stream_mode... as created (``RunOptions``)
    error: str | None
    created_at: float
    updated_at: float

    @classmethod
    def of(cls, row: tuple[Any, ...]) -> ThreadRun:
        return cls(row[0], row[1], row[2], row[3], row[4], json.loads(row[5]),
                   json.loads(row[6]), row[7], row[8], row[9])


@dataclass(frozen=True)
class StreamEvent:
    seq: int
    event: str  # values, updates, messages, metadata, error
    data: Any


class ThreadStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    @classmethod
    async def open(cls, db: Database) -> ThreadStore:
        for ddl in _SCHEMA:
            await db.run(ddl)
        return cls(db)

    # ---- threads ----------------------------------------------------------------------
    async def create_thread(self, thread_id: str, team: str, metadata: dict[str, Any],
                            assistant_id: str | None = None,
                            status: ThreadStatus = "idle") -> ThreadRecord | None:
        """The new thread; None if the team has a thread of that id."""
        now = time.time()
        rows = await self.db.run(
            f"INSERT INTO granikv_team_threads ({_THREAD}) VALUES (?, ?, ?, ?, ?, ?, ?) "
            f"ON CONFLICT (team, thread_id) DO NOTHING RETURNING {_THREAD}",
            (thread_id, team, assistant_id, status, json.dumps(metadata), now, now))
        return ThreadRecord.of(rows[0]) if rows else None

    async def thread(self, team: str, thread_id: str) -> ThreadRecord | None:
        rows = await self.db.run(
            f"SELECT {_THREAD} FROM granikv_team_threads WHERE team = ? AND thread_id = ?",
            (team, thread_id))
        return ThreadRecord.of(rows[0]) if rows else None

    async def set_thread(self, team: str, thread_id: str, status: ThreadStatus,
                         assistant_id: str | None = None) -> None:
        await self.db.run(
            "UPDATE granikv_team_threads SET status = ?, updated_at = ?, "
            "assistant_id = COALESCE(?, assistant_id) WHERE team = ? AND thread_id = ?",
            (status, time.time(), assistant_id, team, thread_id))

    async def set_metadata(self, team: str, thread_id: str,
                           metadata: dict[str, Any]) -> ThreadRecord | None:
        rows = await self.db.run(
            f"UPDATE granikv_team_threads SET metadata = ?, updated_at = ? WHERE team = ? "
            f"AND thread_id = ? RETURNING {_THREAD}",
            (json.dumps(metadata), time.time(), team, thread_id))
        return ThreadRecord.of(rows[0]) if rows else None

    async def delete_thread(self, team: str, thread_id: str) -> None:
        """The thread, its runs and their events."""
        await self.db.run(
            "DELETE FROM granikv_thread_events WHERE run_id IN (SELECT run_id FROM "
            "granikv_thread_runs WHERE team = ? AND thread_id = ?)", (team, thread_id))
        await self.db.run("DELETE FROM granikv_thread_runs WHERE team = ? AND thread_id = ?",
                          (team, thread_id))
        await self.db.run("DELETE FROM granikv_team_threads WHERE team = ? AND thread_id = ?",
                          (team, thread_id))

    async def search_threads(self, team: str, limit: int, offset: int) -> list[ThreadRecord]:
        rows = await self.db.run(
            f"SELECT {_THREAD} FROM granikv_team_threads WHERE team = ? "
            "ORDER BY created_at DESC, thread_id LIMIT ? OFFSET ?", (team, limit, offset))
        return [ThreadRecord.of(r) for r in rows]

    # ---- runs -------------------------------------------------------------------------
    async def create_run(self, run_id: str, thread: ThreadRecord, assistant_id: str,
                         metadata: dict[str, Any], kwargs: dict[str, Any]) -> ThreadRun:
        now = time.time()
        row = (run_id, thread.thread_id, thread.team, assistant_id, "pending",
               json.dumps(metadata), json.dumps(kwargs), None, now, now)
        await self.db.run(f"INSERT INTO granikv_thread_runs ({_RUN}) VALUES "
                          "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", row)
        return ThreadRun.of(row)

    async def run(self, run_id: str) -> ThreadRun | None:
        rows = await self.db.run(
            f"SELECT {_RUN} FROM granikv_thread_runs WHERE run_id = ?", (run_id,))
        return ThreadRun.of(rows[0]) if rows else None

    async def set_run(self, run_id: str, status: RunStatus, error: str | None = None) -> None:
        await self.db.run("UPDATE granikv_thread_runs SET status = ?, error = ?, "
                          "updated_at = ? WHERE run_id = ?",
                          (status, error, time.time(), run_id))

    async def list_runs(self, team: str, thread_id: str, limit: int = 10, offset: int = 0,
                        status: str | None = None) -> list[ThreadRun]:
        """A thread's runs, newest first, one page (LIMIT/OFFSET in the database)."""
        where, params = ("team = ? AND thread_id = ?", (team, thread_id)) if status is None \
            else ("team = ? AND thread_id = ? AND status = ?", (team, thread_id, status))
        rows = await self.db.run(
            f"SELECT {_RUN} FROM granikv_thread_runs WHERE {where} "
            "ORDER BY created_at DESC, run_id LIMIT ? OFFSET ?", (*params, limit, offset))
        return [ThreadRun.of(r) for r in rows]

    async def runs_with_status(self, statuses: frozenset[str]) -> list[ThreadRun]:
        marks = ", ".join("?" for _ in statuses)
        rows = await self.db.run(
            f"SELECT {_RUN} FROM granikv_thread_runs WHERE status IN ({marks}) "
            "ORDER BY created_at", tuple(sorted(statuses)))
        return [ThreadRun.of(r) for r in rows]

    # ---- events -----------------------------------------------------------------------
    async def add_event(self, run_id: str, event: str, data: Any) -> int:
        rows = await self.db.run(
            "INSERT INTO granikv_thread_events (run_id, seq, event, data) "
            "SELECT ?, COALESCE(MAX(seq), 0) + 1, ?, ? FROM granikv_thread_events "
            "WHERE run_id = ? RETURNING seq", (run_id, event, json.dumps(data), run_id))
        return int(rows[0][0])

    async def events(self, run_id: str, after: int = 0) -> list[StreamEvent]:
        rows = await self.db.run(
            "SELECT seq, event, data FROM granikv_thread_events WHERE run_id = ? AND seq > ? "
            "ORDER BY seq", (run_id, after))
        return [StreamEvent(int(s), str(e), json.loads(d)) for s, e, d in rows]
