"""One SQL connection for the run and thread stores: SQLite (aiosqlite) or Postgres
(psycopg).

Statements are written with ``?`` placeholders and portable SQL (``RETURNING``, ``ON
CONFLICT``, ``LIMIT/OFFSET``); Postgres gets ``%s``. One writer, the executor: a lock
keeps its coroutines from interleaving statements; every statement is its own
transaction (SQLite: ``BEGIN IMMEDIATE``, waiting for the checkpointer's writes).
"""

from __future__ import annotations

import asyncio
import sqlite3
from contextlib import suppress
from typing import Any, Protocol

import aiosqlite

# The largest LIMIT / OFFSET both databases take (a signed 64-bit integer): a larger one
# is refused by the route (422), not by the driver (an OverflowError: a 500).
MAX_ROWS = 2**63 - 1


def is_postgres(url: str) -> bool:
    return url.startswith(("postgres://", "postgresql://"))


class Database(Protocol):
    async def run(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Execute one statement in its own transaction; its rows (if any)."""
        ...

    async def close(self) -> None: ...


class SqliteDatabase:
    def __init__(self, conn: aiosqlite.Connection) -> None:
        self.conn = conn
        self._lock = asyncio.Lock()

    @classmethod
    async def open(cls, path: str) -> SqliteDatabase:
        conn = await aiosqlite.connect(path, isolation_level=None, timeout=30.0)
        async with conn.execute("PRAGMA journal_mode=WAL") as cur:
            await cur.fetchall()  # an unfinished statement would keep its read lock
        return cls(conn)

    async def run(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        async with self._lock:
            write = not sql.lstrip().upper().startswith("SELECT")
            try:  # BEGIN too: cancelled while awaited, it still runs on the connection
                if write:
                    await self.conn.execute("BEGIN IMMEDIATE")
                async with self.conn.execute(sql, params) as cur:
                    rows = [tuple(r) for r in await cur.fetchall()]
                if write:
                    await self.conn.execute("COMMIT")
            except BaseException:
                if write:
                    with suppress(sqlite3.OperationalError):  # none open: BEGIN failed
                        await self.conn.execute("ROLLBACK")
                raise
            return rows

    async def close(self) -> None:
        await self.conn.close()


class PostgresDatabase:
    def __init__(self, conn: Any) -> None:
        self.conn = conn  # psycopg.AsyncConnection, autocommit
        self._lock = asyncio.Lock()

    @classmethod
    async def open(cls, url: str) -> PostgresDatabase:
        import psycopg  # only a Postgres store needs it

        return cls(await psycopg.AsyncConnection.connect(url, autocommit=True))

    async def run(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        async with self._lock, self.conn.cursor() as cur:
            await cur.execute(sql.replace("?", "%s"), params)
            return [tuple(r) for r in await cur.fetchall()] if cur.description else []

    async def close(self) -> None:
        await self.conn.close()


async def open_database(url: str) -> Database:
    """``postgresql://...`` or a SQLite file path."""
    if is_postgres(url):
        return await PostgresDatabase.open(url)
    return await SqliteDatabase.open(url)
