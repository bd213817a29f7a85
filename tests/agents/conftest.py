"""A run or thread store (``store_url``) on each backend: a SQLite file, or a fresh
database on a real PostgreSQL server (one server for the session, from the ``pgserver``
wheel)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.agents.threads_kit import fresh_database, postgres_server


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    yield from postgres_server()


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A store nobody used yet: a SQLite file, or a new Postgres database."""
    if request.param == "sqlite":
        return str(tmp_path / "runs.sqlite")
    return fresh_database(str(request.getfixturevalue("pg_server")))
