"""One executor per run store: an exclusive lock that dies with its process.

An executor resumes the runs that a dead predecessor left "running". Two live executors
on one store would each resume the other's runs, and run their turns twice. So opening a
store takes an exclusive lock: on a SQLite file, ``flock`` on ``<store>.lock``; on
Postgres, a session advisory lock held by a connection of its own. The kernel (or the
server, when the connection drops) releases the lock when its process dies, so a
replica that Serve starts after a crash gets it at once. A replica that starts while the
old one drains (a rolling update) waits for it, up to ``wait_s``.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import time
from typing import IO, Any

from granikv_platform.database import is_postgres

# the advisory lock's key: one run store per Postgres database
_PG_LOCK_KEY = 0x6772616E696B76  # "granikv"


class StoreBusy(RuntimeError):
    """Another live executor owns the run store."""


class StoreOwner:
    """``await StoreOwner.acquire(store)`` ... ``await owner.release()``."""

    def __init__(self, release: Any) -> None:
        self._release = release

    @classmethod
    async def acquire(cls, store: str, wait_s: float = 60.0) -> StoreOwner:
        """``store``: a SQLite file or a ``postgresql://`` URL. Raises StoreBusy after
        ``wait_s``."""
        deadline = time.monotonic() + wait_s
        if is_postgres(store):
            return await cls._acquire_postgres(store, deadline)
        path = f"{store}.lock"
        handle: IO[str] = open(path, "a+")  # noqa: SIM115  (held until release)
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    handle.seek(0)
                    holder = handle.read().strip() or "unknown"
                    handle.close()
                    raise StoreBusy(f"the run store {store} is owned by another "
                                    f"executor (pid {holder})") from None
                await asyncio.sleep(0.5)
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()))
        handle.flush()

        async def release() -> None:
            fcntl.flock(handle, fcntl.LOCK_UN)
            handle.close()

        return cls(release)

    @classmethod
    async def _acquire_postgres(cls, url: str, deadline: float) -> StoreOwner:
        import psycopg  # only a Postgres store needs it
        from psycopg.conninfo import conninfo_to_dict

        conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
        try:
            while True:
                cur = await conn.execute("SELECT pg_try_advisory_lock(%s)", (_PG_LOCK_KEY,))
                row = await cur.fetchone()
                if row is not None and row[0]:
                    break
                if time.monotonic() > deadline:
                    cur = await conn.execute(
                        "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted "
                        "AND objid = %s", (_PG_LOCK_KEY & 0xFFFFFFFF,))
                    holder = await cur.fetchone()
                    db = conninfo_to_dict(url).get("dbname", "?")
                    raise StoreBusy(f"the run store (Postgres database {db!r}) is owned by "
                                    "another executor (server pid "
                                    f"{holder[0] if holder else 'unknown'})")
                await asyncio.sleep(0.5)
        except BaseException:
            await conn.close()
            raise
        return cls(conn.close)  # closing the session releases its advisory locks

    async def release(self) -> None:
        await self._release()
