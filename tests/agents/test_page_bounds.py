"""Over HTTP (the suite's app): a page past what the databases can count is refused
before the database (SQLite's OverflowError was a 500): by the route (422 naming the
field) for the team's runs and a thread's runs, by the body's parser (400, an integer
over 64 bits) for the assistants' and threads' searches."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest

from granikv_platform.database import MAX_ROWS

pytestmark = [pytest.mark.ray, pytest.mark.vllm]


def test_an_offset_past_a_64_bit_integer_is_a_422(
        client: Callable[[str | None], httpx.Client]) -> None:
    red = client("red")
    thread = red.post("/teams/red/threads", json={}).json()["thread_id"]
    for offset, statuses in ((MAX_ROWS + 1, (422, 422, 400, 400)), (MAX_ROWS, (200,) * 4)):
        answers = [red.get("/teams/red/runs", params={"limit": 1, "offset": offset}),
                   red.get(f"/teams/red/threads/{thread}/runs", params={"offset": offset}),
                   red.post("/teams/red/threads/search", json={"offset": offset}),
                   red.post("/teams/red/assistants/search", json={"offset": offset})]
        for r, status in zip(answers, statuses):
            assert r.status_code == status, (offset, r.request.url, r.text)
            if status != 200:
                assert "offset" in r.json()["error"]["message"], r.text
            else:
                assert r.json() == [] or r.json().get("data") == [], r.text
