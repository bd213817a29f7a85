"""The Responses API store on both databases (a SQLite file and a real PostgreSQL
server): a response and its conversation read back as saved, replaced by a second save,
kept across a reopen, shared by two stores on one database, and scoped by team."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from granikv_platform.response_store import ResponseStore, default_store_url
from tests.agents.threads_kit import fresh_database, postgres_server


@pytest.fixture(scope="module")
def pg_server() -> Iterator[str]:
    yield from postgres_server()


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A store nobody used yet: a SQLite file, or a new Postgres database."""
    if request.param == "sqlite":
        return str(tmp_path / "responses.sqlite")
    return fresh_database(str(request.getfixturevalue("pg_server")))


def response(rid: str, text: str, created_at: int = 1_700_000_000) -> dict[str, Any]:
    return {"id": rid, "object": "response", "created_at": created_at, "status": "completed",
            "model": "tiny", "output": [answer(rid, text)]}


def answer(rid: str, text: str) -> dict[str, Any]:
    return {"type": "message", "id": f"msg_{rid}", "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}


def ask(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": text}


async def _round_trip_and_replace(url: str) -> None:
    store = await ResponseStore.open(url)
    try:
        long = "x" * 60_000  # a large conversation: tens of KB in one row
        items = [ask("Hi"), answer("resp_1", "Hello"), ask(long), answer("resp_1", "ok ü\u0000")]
        await store.save("red", response("resp_1", "ok"), items)
        assert await store.get("red", "resp_1") == response("resp_1", "ok")
        assert await store.conversation("red", "resp_1") == items
        assert await store.get("red", "resp_2") is None
        assert await store.conversation("red", "resp_2") is None

        await store.save("red", response("resp_1", "again", 1_700_000_009), items[:2])
        assert await store.get("red", "resp_1") == response("resp_1", "again", 1_700_000_009)
        assert await store.conversation("red", "resp_1") == items[:2]
        rows = await store.db.run("SELECT team, response_id, created_at FROM granikv_responses")
        assert [(t, r, float(c)) for t, r, c in rows] == [("red", "resp_1", 1_700_000_009.0)]
    finally:
        await store.close()


async def _teams_see_only_their_own(url: str) -> None:
    store = await ResponseStore.open(url)
    try:
        await store.save("red", response("resp_1", "red's"), [ask("r")])
        for other in ("blue", ""):  # "": the caller without a team
            assert await store.get(other, "resp_1") is None
            assert await store.conversation(other, "resp_1") is None
            assert await store.delete(other, "resp_1") is False
        assert await store.get("red", "resp_1") == response("resp_1", "red's")

        await store.save("", response("resp_1", "nobody's"), [ask("n")])  # same id, own scope
        assert await store.get("", "resp_1") == response("resp_1", "nobody's")
        assert await store.conversation("red", "resp_1") == [ask("r")]

        assert await store.delete("red", "resp_1") is True
        assert await store.get("red", "resp_1") is None
        assert await store.conversation("red", "resp_1") is None
        assert await store.delete("red", "resp_1") is False
        assert await store.conversation("", "resp_1") == [ask("n")]
    finally:
        await store.close()


async def _kept_across_a_restart(url: str) -> None:
    first = await ResponseStore.open(url)
    await first.save("red", response("resp_1", "before"), [ask("q"), answer("resp_1", "a")])
    await first.close()
    again = await ResponseStore.open(url)  # the tables exist: opening keeps their rows
    try:
        assert await again.get("red", "resp_1") == response("resp_1", "before")
        assert await again.conversation("red", "resp_1") == [ask("q"), answer("resp_1", "a")]
    finally:
        await again.close()


async def _replicas_share_one_database(url: str) -> None:
    a, b = await asyncio.gather(ResponseStore.open(url), ResponseStore.open(url))
    try:
        first = [ask("q1"), answer("resp_1", "a1")]
        await a.save("red", response("resp_1", "a1"), first)
        continued = await b.conversation("red", "resp_1")  # the follow-up lands on b
        assert continued == first
        second = [*continued, ask("q2"), answer("resp_2", "a2")]
        await b.save("red", response("resp_2", "a2"), second)
        assert await a.conversation("red", "resp_2") == second
        assert await a.delete("red", "resp_1") is True
        assert await b.get("red", "resp_1") is None
        assert await b.get("red", "resp_2") == response("resp_2", "a2")
    finally:
        await a.close()
        await b.close()


async def _many_open_at_once(url: str) -> None:
    stores = await asyncio.gather(*(ResponseStore.open(url) for _ in range(8)))
    try:
        await stores[0].save("red", response("resp_1", "a"), [])
        assert [await s.get("red", "resp_1") for s in stores] == [response("resp_1", "a")] * 8
    finally:
        for s in stores:
            await s.close()


def test_round_trip_and_replace(store_url: str) -> None:
    asyncio.run(_round_trip_and_replace(store_url))


def test_teams_see_only_their_own(store_url: str) -> None:
    asyncio.run(_teams_see_only_their_own(store_url))


def test_kept_across_a_restart(store_url: str) -> None:
    asyncio.run(_kept_across_a_restart(store_url))


def test_replicas_share_one_database(store_url: str) -> None:
    asyncio.run(_replicas_share_one_database(store_url))


def test_many_open_at_once(store_url: str) -> None:
    """Replicas starting together all create the table (on Postgres, a race)."""
    asyncio.run(_many_open_at_once(store_url))


def test_default_store_url() -> None:
    url = default_store_url("gkvtest")
    assert url == str(Path(tempfile.gettempdir()) / "granikv-gkvtest-responses.sqlite")
    assert Path(url).parent.is_dir()
