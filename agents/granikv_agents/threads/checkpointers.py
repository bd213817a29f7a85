"""LangGraph's checkpointer on the thread store's database: ``AsyncSqliteSaver`` for a
file path, ``AsyncPostgresSaver`` (langgraph-checkpoint-postgres) for a
``postgresql://`` URL. Both create their tables on open."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiosqlite
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

from granikv_agents.threads.database import is_postgres


@asynccontextmanager
async def open_checkpointer(url: str) -> AsyncIterator[BaseCheckpointSaver[Any]]:
    if is_postgres(url):
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

        async with AsyncPostgresSaver.from_conn_string(url) as pg:
            await pg.setup()
            yield pg
        return
    conn = await aiosqlite.connect(url)
    try:
        saver = AsyncSqliteSaver(conn)
        await saver.setup()
        yield saver
    finally:
        await conn.close()
