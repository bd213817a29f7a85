"""ResponseStore: the ``store: true`` responses of ``POST /v1/responses``, in the
platform's database (a SQLite file, or Postgres on a cluster).

vLLM's ``OpenAIServingResponses`` keeps stored responses in a dict of its process: a
``previous_response_id`` then continues only on the replica that answered, and only
until it restarts. Here a response lives in a table that every replica opens, so a
follow-up continues on any replica and after a restart. A row is one response, keyed by
(team, response id) as the thread store keys threads: another team's id reads as no
response at all, and the team ``""`` (no auth) is a scope of its own. Beside the
response object the row holds its conversation: the Responses API input items a
follow-up continues from (the earlier items, the request's input, the response's
output). Both are JSON text; neither has a size limit beyond the database's.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any

from granikv_platform.database import Database, open_database

_SCHEMA = [
    "CREATE TABLE IF NOT EXISTS granikv_responses (team TEXT NOT NULL, response_id TEXT NOT "
    "NULL, response TEXT NOT NULL, items TEXT NOT NULL, created_at DOUBLE PRECISION NOT "
    "NULL, PRIMARY KEY (team, response_id))",
]
# Postgres checks IF NOT EXISTS before it takes its catalog locks: two processes creating
# the same table at once may both pass it, and the later fails on the catalog's unique
# index (23505) or as a duplicate (42P07 table, 42710 other object). The table is then
# there: running the statement again skips it.
_CREATED_MEANWHILE = frozenset({"23505", "42P07", "42710"})
_CREATE_ATTEMPTS = 3


def default_store_url(app: str) -> str:
    """The store of a local app: a SQLite file in the temporary directory (its folder
    made), beside the run store's ``granikv-<app>-runs.sqlite``."""
    path = Path(tempfile.gettempdir()) / f"granikv-{app}-responses.sqlite"
    path.parent.mkdir(parents=True, exist_ok=True)
    return str(path)


async def create_tables(db: Database) -> None:
    for ddl in _SCHEMA:
        for attempt in range(_CREATE_ATTEMPTS):
            try:
                await db.run(ddl)
                break
            except Exception as e:  # psycopg's errors carry the SQLSTATE, SQLite's none
                if getattr(e, "sqlstate", None) not in _CREATED_MEANWHILE \
                        or attempt == _CREATE_ATTEMPTS - 1:
                    raise


class ResponseStore:
    """Open with ``await ResponseStore.open(url)`` (a SQLite file or a ``postgresql://``
    URL); any number of processes may open one database at once. Every statement is its
    own transaction on the store's own connection (``database.py``)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    @classmethod
    async def open(cls, url: str) -> ResponseStore:
        db = await open_database(url)
        try:
            await create_tables(db)
        except BaseException:
            await db.close()  # aiosqlite's thread would keep the process alive
            raise
        return cls(db)

    async def close(self) -> None:
        await self.db.close()

    async def save(self, team: str, response: dict[str, Any], items: list[dict[str, Any]]) -> None:
        """``response`` under its ``id``, with the conversation up to and including it;
        a saved id is replaced. Created: the response's ``created_at``, else now."""
        created = response.get("created_at")
        created_at = float(created) if isinstance(created, (int, float)) else time.time()
        await self.db.run(
            "INSERT INTO granikv_responses (team, response_id, response, items, created_at) "
            "VALUES (?, ?, ?, ?, ?) ON CONFLICT (team, response_id) DO UPDATE SET "
            "response = excluded.response, items = excluded.items, "
            "created_at = excluded.created_at",
            (team, str(response["id"]), json.dumps(response), json.dumps(items), created_at))

    async def get(self, team: str, response_id: str) -> dict[str, Any] | None:
        """The response object; None if the team has none of that id."""
        text = await self._column("response", team, response_id)
        return None if text is None else dict(json.loads(text))

    async def conversation(self, team: str, response_id: str) -> list[dict[str, Any]] | None:
        """The items a follow-up with ``previous_response_id`` continues from; None if the
        team has no response of that id."""
        text = await self._column("items", team, response_id)
        return None if text is None else list(json.loads(text))

    async def delete(self, team: str, response_id: str) -> bool:
        """Whether the team had a response of that id."""
        rows = await self.db.run(
            "DELETE FROM granikv_responses WHERE team = ? AND response_id = ? "
            "RETURNING response_id", (team, response_id))
        return bool(rows)

    async def _column(self, column: str, team: str, response_id: str) -> str | None:
        rows = await self.db.run(
            f"SELECT {column} FROM granikv_responses WHERE team = ? AND response_id = ?",
            (team, response_id))
        return str(rows[0][0]) if rows else None
