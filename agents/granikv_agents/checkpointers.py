"""LangGraph's checkpointer on the stores' database: ``AsyncSqliteSaver`` for a file
path, ``AsyncPostgresSaver`` (langgraph-checkpoint-postgres) for a ``postgresql://``
URL. Both create their tables on open, and both can wait for their write saves
(``flush``).

LangGraph saves a finished task's writes in a background task and streams the task's
update without waiting for it. An executor that reported a turn at once and then died
before the write reached the database would run that turn again after the resume. The
run executor therefore flushes before it reports: a reported turn is in the checkpoint.
A save is never cut off half-way by a cancelled run: it finishes, and ``flush`` waits
for it too.

``copy_checkpoints`` copies a thread's checkpoints to another thread (the threads API's
copy): neither saver implements ``acopy_thread``.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from typing import Any

import aiosqlite
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

from granikv_platform.database import is_postgres


class FlushedWrites(BaseCheckpointSaver[Any]):
    """A saver whose pending-write saves can be awaited (``flush``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._saving: set[asyncio.Future[Any]] = set()

    def aput_writes(  # type: ignore[override]  # a plain def: registered when LangGraph submits it
            self, config: RunnableConfig, writes: Any, task_id: str,
            task_path: str = "") -> Coroutine[Any, Any, None]:
        save = super().aput_writes(config, writes, task_id, task_path)
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # the sync API, from another thread: nothing to track
            return save
        return _shielded(self._track(save))

    async def aput(self, config: RunnableConfig, checkpoint: Any, metadata: Any,
                   new_versions: Any) -> RunnableConfig:
        """The checkpoint's save runs to its end when the run is cancelled meanwhile
        (a client's cancel, a deleted thread): AsyncSqliteSaver cancelled between its
        INSERT and its COMMIT left the transaction open, holding the file's write lock
        until the next save, so every other writer of the file waited out its busy
        timeout (the thread's next run answered 500). The saved checkpoint is the
        step's: LangGraph counts the step as done once it is saved."""
        save = self._track(super().aput(config, checkpoint, metadata, new_versions))
        return await asyncio.shield(save)

    def _track(self, save: Coroutine[Any, Any, Any]) -> asyncio.Future[Any]:
        saving = asyncio.ensure_future(save)
        self._saving.add(saving)
        saving.add_done_callback(self._saving.discard)
        return saving

    async def flush(self) -> None:
        """Wait for every write save started so far (their errors are LangGraph's)."""
        if self._saving:
            await asyncio.gather(*list(self._saving), return_exceptions=True)


async def _shielded(saving: asyncio.Future[None]) -> None:
    await asyncio.shield(saving)  # a cancelled graph step does not cancel the save


class SqliteSaver(FlushedWrites, AsyncSqliteSaver):
    pass


@functools.cache
def _postgres_saver() -> type[FlushedWrites]:
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver  # a Postgres store only

    class PostgresSaver(FlushedWrites, AsyncPostgresSaver):
        pass

    return PostgresSaver


@asynccontextmanager
async def open_checkpointer(url: str) -> AsyncIterator[FlushedWrites]:
    """The saver on ``url``; on exit its write saves land before its connection closes."""
    if is_postgres(url):
        async with _postgres_saver().from_conn_string(url) as pg:  # type: ignore[attr-defined]
            await pg.setup()
            try:
                yield pg
            finally:
                await pg.flush()
        return
    conn = await aiosqlite.connect(url)
    saver = SqliteSaver(conn)
    try:
        await saver.setup()
        yield saver
    finally:
        # A save between its INSERT and its COMMIT when the connection closes leaves a
        # closed connection that still holds the file's write lock until the save's
        # cursor is collected: the next executor on the file found it locked.
        await saver.flush()
        async with saver.lock:  # and no checkpoint save mid-statement
            await conn.close()


async def copy_checkpoints(saver: BaseCheckpointSaver[Any], source: str, target: str) -> None:
    """Every checkpoint of thread ``source`` (all namespaces), with its parent links and
    pending writes, into thread ``target`` (the savers here do not implement
    ``acopy_thread``). Oldest first, so each parent is there before its child; every
    channel is given as new, so Postgres stores each value's blob under the target."""
    found = [t async for t in saver.alist({"configurable": {"thread_id": source}})]
    for tup in reversed(found):
        cfg = tup.config["configurable"]
        ns = cfg.get("checkpoint_ns", "")
        parent = (tup.parent_config or {}).get("configurable", {}).get("checkpoint_id")
        at: RunnableConfig = {"configurable": {"thread_id": target, "checkpoint_ns": ns}}
        if parent is not None:
            at["configurable"]["checkpoint_id"] = parent
        await saver.aput(at, tup.checkpoint, tup.metadata,
                         dict(tup.checkpoint["channel_versions"]))
        written = {"configurable": {"thread_id": target, "checkpoint_ns": ns,
                                    "checkpoint_id": tup.checkpoint["id"]}}
        by_task: dict[str, list[tuple[str, Any]]] = {}
        for task_id, channel, value in tup.pending_writes or []:
            by_task.setdefault(task_id, []).append((channel, value))
        for task_id, writes in by_task.items():
            await saver.aput_writes(written, writes, task_id)  # type: ignore[arg-type]
