"""One SQL connection for the run and thread stores: SQLite (aiosqlite) or Postgres
(psycopg).

Statements are written with ``?`` placeholders and portable SQL (``RETURNING``, ``ON
CONFLICT``, ``LIMIT/OFFSET``); Postgres gets ``%s``. One writer, the executor: a lock
keeps its coroutines from interleaving statements; every statement is its own
transaction (SQLite: ``BEGIN IMMEDIATE``, waiting for the checkpointer's writes).

Schema changes (tables created on open, a previous release's data carried over) are made
under ``schema_change``: on Postgres one process at a time (an advisory lock), because
two processes running ``CREATE TABLE IF NOT EXISTS`` at once on a fresh database fail
with a unique violation (the app's replicas open their stores together); SQLite's
``BEGIN IMMEDIATE`` already serializes them.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext, suppress
from typing import Any, Protocol

import aiosqlite


def is_postgres(url: str) -> bool:
    return url.startswith(("postgres://", "postgresql://"))


class Database(Protocol):
    async def run(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Execute one statement in its own transaction; its rows (if any)."""
        ...

    def schema_change(self) -> AbstractAsyncContextManager[Any]:
        """Held while the schema changes: one process at a time."""
        ...

    async def close(self) -> None: ...


# pg_advisory_lock's key for GraniKV's schema changes (its own and the checkpointer's)
SCHEMA_LOCK_KEY = int.from_bytes(b"granikv", "big")
SCHEMA_LOCK_POLL_S = 0.05


@asynccontextmanager
async def postgres_schema_lock(conn: Any) -> AsyncIterator[None]:
    """Postgres' session advisory lock on ``conn`` (a ``psycopg.AsyncConnection`` in
    autocommit), for a schema change. Taken by polling, not by a waiting
    ``pg_advisory_lock``: a waiting statement is an open transaction, which the holder's
    ``CREATE INDEX CONCURRENTLY`` (the checkpointer's migrations) waits for: a deadlock."""
    while True:
        cur = await conn.execute("SELECT pg_try_advisory_lock(%s) AS locked",
                                 (SCHEMA_LOCK_KEY,))
        row = await cur.fetchone()  # a tuple, or a dict (the checkpointer's connection)
        if (row["locked"] if isinstance(row, dict) else row[0]):
            break
        await asyncio.sleep(SCHEMA_LOCK_POLL_S)
    try:
        yield
    finally:
        await conn.execute("SELECT pg_advisory_unlock(%s)", (SCHEMA_LOCK_KEY,))


SQLITE_BUSY_TIMEOUT_S = 30.0
_WAL_RETRY_S = 0.02


async def sqlite_wal(conn: aiosqlite.Connection) -> None:
    """Put the file in WAL mode (it stays so). On a new file that another connection is
    opening at the same moment, SQLite answers "database is locked" at once, without its
    busy timeout (both connections hold a read lock and want the exclusive one): try again
    until the busy timeout has passed."""
    deadline = asyncio.get_running_loop().time() + SQLITE_BUSY_TIMEOUT_S
    while True:
        try:
            async with conn.execute("PRAGMA journal_mode=WAL") as cur:
                await cur.fetchall()  # an unfinished statement would keep its read lock
            return
        except sqlite3.OperationalError as e:
            if ("locked" not in str(e) and "busy" not in str(e)) or \
                    asyncio.get_running_loop().time() > deadline:
                raise
        await asyncio.sleep(_WAL_RETRY_S)


class SqliteDatabase:
    def __init__(self, conn: aiosqlite.Connection) -> None:
        self.conn = conn
        self._lock = asyncio.Lock()

    @classmethod
    async def open(cls, path: str) -> SqliteDatabase:
        conn = await aiosqlite.connect(path, isolation_level=None,
                                       timeout=SQLITE_BUSY_TIMEOUT_S)
        try:
            await sqlite_wal(conn)
        except BaseException:
            await conn.close()  # aiosqlite's thread would keep the process alive
            raise
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

    def schema_change(self) -> AbstractAsyncContextManager[Any]:
        return nullcontext()  # every statement is BEGIN IMMEDIATE already

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

    def schema_change(self) -> AbstractAsyncContextManager[Any]:
        return postgres_schema_lock(self.conn)

    async def close(self) -> None:
        await self.conn.close()


async def open_database(url: str) -> Database:
    """``postgresql://...`` or a SQLite file path."""
    if is_postgres(url):
        return await PostgresDatabase.open(url)
    return await SqliteDatabase.open(url)
