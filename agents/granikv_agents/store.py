"""RunStore: the runs and their events, in the database that holds LangGraph's
checkpoints (a SQLite file or Postgres; a run id is its checkpoint thread id).

The checkpoints are the truth about a run's progress; this store adds what LangGraph
does not keep: which team owns a run, its spec and task (to rebuild its graph on
resume), its status, and the ordered events that ``GET /runs/{id}/events`` streams.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Literal

from granikv_platform.database import Database, open_database

Status = Literal["running", "succeeded", "failed", "interrupted"]
RESUMABLE: frozenset[str] = frozenset({"failed", "interrupted"})
TERMINAL: frozenset[str] = frozenset({"succeeded", "failed", "interrupted"})

_SCHEMA = [
    "CREATE TABLE IF NOT EXISTS granikv_runs (run_id TEXT PRIMARY KEY, team TEXT NOT NULL, "
    "spec TEXT NOT NULL, task TEXT NOT NULL, status TEXT NOT NULL, error TEXT, attempts "
    "INTEGER NOT NULL DEFAULT 1, created_at DOUBLE PRECISION NOT NULL, updated_at DOUBLE "
    "PRECISION NOT NULL)",
    "CREATE INDEX IF NOT EXISTS granikv_runs_team ON granikv_runs (team, created_at)",
    "CREATE INDEX IF NOT EXISTS granikv_runs_status ON granikv_runs (status)",
    "CREATE TABLE IF NOT EXISTS granikv_run_events (run_id TEXT NOT NULL, seq INTEGER NOT "
    "NULL, at DOUBLE PRECISION NOT NULL, type TEXT NOT NULL, data TEXT NOT NULL, "
    "PRIMARY KEY (run_id, seq))",
]
_ALL = 2**62  # LIMIT for "no limit": SQLite needs a LIMIT before an OFFSET
_COLUMNS = "run_id, team, spec, task, status, error, attempts, created_at, updated_at"


@dataclass(frozen=True)
class RunRecord:
    run_id: str
    team: str
    spec: str  # the TeamSpec as JSON (context inline)
    task: str
    status: Status
    error: str | None
    attempts: int  # executions: 1 + resumes
    created_at: float
    updated_at: float

    def view(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "team": self.team, "status": self.status,
                "error": self.error, "attempts": self.attempts, "task": self.task,
                "created_at": self.created_at, "updated_at": self.updated_at}


@dataclass(frozen=True)
class RunEvent:
    seq: int  # 1, 2, ... per run
    at: float
    type: str  # status, context, turn, round, result
    data: dict[str, Any]

    def view(self) -> dict[str, Any]:
        return {"seq": self.seq, "at": self.at, "type": self.type, **self.data}


class RunStore:
    """Open with ``await RunStore.open(url)`` (a SQLite file or a ``postgresql://`` URL);
    one writer (the run executor). Every statement is its own transaction on the store's
    own connection (``database.py``)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    @classmethod
    async def open(cls, url: str) -> RunStore:
        db = await open_database(url)
        try:
            for statement in _SCHEMA:
                await db.run(statement)
        except BaseException:
            await db.close()  # aiosqlite's thread would keep the process alive
            raise
        return cls(db)

    async def close(self) -> None:
        await self.db.close()

    # ---- runs -------------------------------------------------------------------------
    async def create(self, run_id: str, team: str, spec: str, task: str) -> RunRecord:
        now = time.time()
        await self.db.run(
            f"INSERT INTO granikv_runs ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (run_id, team, spec, task, "running", None, 1, now, now))
        return RunRecord(run_id, team, spec, task, "running", None, 1, now, now)

    async def get(self, run_id: str, team: str | None = None) -> RunRecord | None:
        """The run, or None; with ``team``, only a run of that team (another team's run
        is as absent as no run)."""
        if team is None:
            rows = await self.db.run(f"SELECT {_COLUMNS} FROM granikv_runs WHERE run_id = ?",
                                    (run_id,))
        else:
            rows = await self.db.run(f"SELECT {_COLUMNS} FROM granikv_runs WHERE run_id = ? "
                                    "AND team = ?", (run_id, team))
        return RunRecord(*rows[0]) if rows else None

    async def list_runs(self, team: str | None = None,
                        statuses: frozenset[str] | None = None, limit: int | None = None,
                        offset: int = 0) -> list[RunRecord]:
        """Runs in creation order, filtered and paged by the database (``limit`` None:
        all of them)."""
        where, params = [], []
        if team is not None:
            where.append("team = ?")
            params.append(team)
        if statuses is not None:
            where.append(f"status IN ({', '.join('?' for _ in statuses)})")
            params += sorted(statuses)
        cond = f"WHERE {' AND '.join(where)} " if where else ""
        rows = await self.db.run(
            f"SELECT {_COLUMNS} FROM granikv_runs {cond}ORDER BY created_at, run_id "
            "LIMIT ? OFFSET ?", (*params, _ALL if limit is None else limit, offset))
        return [RunRecord(*row) for row in rows]

    async def set_status(self, run_id: str, status: Status, error: str | None = None,
                         resumed: bool = False) -> None:
        await self.db.run(
            "UPDATE granikv_runs SET status = ?, error = ?, updated_at = ?, "
            "attempts = attempts + ? WHERE run_id = ?",
            (status, error, time.time(), int(resumed), run_id))

    # ---- events -----------------------------------------------------------------------
    async def add_event(self, run_id: str, type_: str, data: dict[str, Any]) -> int:
        rows = await self.db.run(
            "INSERT INTO granikv_run_events (run_id, seq, at, type, data) "
            "SELECT ?, COALESCE(MAX(seq), 0) + 1, ?, ?, ? FROM granikv_run_events "
            "WHERE run_id = ? RETURNING seq",
            (run_id, time.time(), type_, json.dumps(data), run_id))
        return int(rows[0][0])

    async def events(self, run_id: str, after: int = 0) -> list[RunEvent]:
        rows = await self.db.run(
            "SELECT seq, at, type, data FROM granikv_run_events "
            "WHERE run_id = ? AND seq > ? ORDER BY seq", (run_id, after))
        return [RunEvent(int(s), float(a), str(t), json.loads(d)) for s, a, t, d in rows]
