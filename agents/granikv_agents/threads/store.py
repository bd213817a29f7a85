"""ThreadStore: threads, their runs and the runs' stream events, beside the checkpoints.

A thread id is its team's: two teams may each have a thread ``t1``, and every lookup
names the team. The checkpoints hold a thread's state under the LangGraph thread id
``<team>/<thread id>`` (``ThreadRecord.checkpoint_thread``; team names have no ``/``);
this store adds what LangGraph Server shows besides: its status and metadata, each run's
status and options, and the ordered events a run streamed (so a client that reconnects
with ``Last-Event-ID`` gets the rest). Listing pages in SQL.

The previous release kept threads in ``granikv_threads``, keyed by thread id alone, with
their checkpoints under the bare id. A store that finds that table carries every thread
in it over when it opens (``carry_over``), then renames it ``granikv_threads_premigration``.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import Any, Literal

from langgraph.checkpoint.base import BaseCheckpointSaver

from granikv_agents.checkpointers import copy_checkpoints
from granikv_platform.database import Database, PostgresDatabase

logger = logging.getLogger(__name__)

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


async def create_tables(db: Database) -> None:
    for ddl in _SCHEMA:
        await db.run(ddl)


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
    async def open(cls, db: Database,
                   saver: BaseCheckpointSaver[Any] | None = None) -> ThreadStore:
        """The store on ``db``; the previous release's threads carried over first (their
        checkpoints by ``saver``, required where there are any)."""
        await create_tables(db)
        if await _has_table(db, _OLD):
            if saver is None:
                raise RuntimeError(f"{_OLD} holds threads of the previous release: the "
                                   "store needs the checkpointer to carry them over")
            carried = await carry_over(db, saver)
            logger.info("GraniKV: carried over %d threads of the previous release to "
                        "team-scoped thread ids", carried)
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


# ---- the previous release's threads ------------------------------------------------------
_OLD = "granikv_threads"  # thread_id the key, checkpoints under the bare thread id
_KEPT = "granikv_threads_premigration"


async def old_threads(db: Database) -> list[ThreadRecord]:
    """The threads the previous release stored, oldest first."""
    rows = await db.run(f"SELECT {_THREAD} FROM {_OLD} ORDER BY created_at, thread_id")
    return [ThreadRecord.of(r) for r in rows]


async def carry_over(db: Database, saver: BaseCheckpointSaver[Any]) -> int:
    """Every old thread carried over (``carry_over_thread``), then the old table renamed;
    how many threads were new here. A carry-over that stopped half-way (the process died)
    is completed by the next: each step is idempotent and the table goes last."""
    carried = sum([await carry_over_thread(db, saver, rec) for rec in await old_threads(db)])
    kept = _KEPT
    while await _has_table(db, kept):  # a previous carry-over's, after a downgrade
        kept = f"{_KEPT}_{time.time_ns()}"
    await db.run(f"ALTER TABLE {_OLD} RENAME TO {kept}")
    return carried


async def carry_over_thread(db: Database, saver: BaseCheckpointSaver[Any],
                            rec: ThreadRecord) -> bool:
    """One old thread under its team: its checkpoints copied from the bare id to
    ``<team>/<id>`` (a repeated copy rewrites the same checkpoints), then its row (kept if
    there already). Its runs and events keep their keys: they named the team already.
    The bare-id checkpoints stay for a downgrade, but not an id with a ``/``, which would
    read as another team's thread (``u/b`` is team ``u``'s ``b``). Whether the row is new."""
    await copy_checkpoints(saver, rec.thread_id, rec.checkpoint_thread)
    rows = await db.run(
        f"INSERT INTO granikv_team_threads ({_THREAD}) VALUES (?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT (team, thread_id) DO NOTHING RETURNING thread_id",
        (rec.thread_id, rec.team, rec.assistant_id, rec.status, json.dumps(rec.metadata),
         rec.created_at, rec.updated_at))
    if "/" in rec.thread_id:
        await saver.adelete_thread(rec.thread_id)
    return bool(rows)


async def _has_table(db: Database, name: str) -> bool:
    if isinstance(db, PostgresDatabase):
        sql = ("SELECT 1 FROM information_schema.tables WHERE table_schema = "
               "current_schema() AND table_name = ?")
    else:
        sql = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?"
    return bool(await db.run(sql, (name,)))
