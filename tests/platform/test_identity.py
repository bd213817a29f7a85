"""Team resolution and vllm_xargs scoping (the one place the security work will change)."""

from __future__ import annotations

from typing import Any

import pytest
from starlette.requests import Request

from granikv_platform.errors import ApiError
from granikv_platform.identity import ANONYMOUS, TEAM_HEADER, bind_body, resolve_team


def request(team: str | None) -> Request:
    headers = [(TEAM_HEADER.lower().encode(), team.encode())] if team else []
    return Request({"type": "http", "method": "GET", "path": "/", "headers": headers})


def test_resolve_team() -> None:
    assert resolve_team(request("red")) == "red"
    assert resolve_team(request(None)) is None
    assert resolve_team(request(None), path_team="red") == "red"
    assert resolve_team(request("red"), path_team="red") == "red"
    with pytest.raises(ApiError) as e:
        resolve_team(request("blue"), path_team="red")
    assert e.value.status == 403
    with pytest.raises(ApiError) as e:
        resolve_team(request("Bad Team!"))
    assert e.value.status == 400


def test_bind_body_scopes_to_the_caller() -> None:
    body: dict[str, Any] = {"model": "m", "vllm_xargs": {"granikv_prefix_id": "p", "x": 1}}
    out = bind_body(body, "red")
    assert out["vllm_xargs"] == {"granikv_prefix_id": "p", "x": 1, "granikv_team": "red"}
    assert "granikv_team" not in body["vllm_xargs"]  # the input is not modified
    anonymous = bind_body({"model": "m"}, None)  # never matches a team's prefix
    assert anonymous == {"model": "m", "vllm_xargs": {"granikv_team": ANONYMOUS}}
    assert bind_body({"model": "m"}, "red", "ctx")["vllm_xargs"] == {
        "granikv_team": "red", "granikv_prefix_id": "ctx"}


@pytest.mark.parametrize(("team", "xargs", "status"), [
    ("red", {"granikv_register": 1}, 400),
    ("red", {"granikv_pin": 0}, 400),
    ("red", {"granikv_team": "blue"}, 403),
    (None, {"granikv_prefix_id": "p"}, 401),
    (None, {"granikv_team": "red"}, 401),
    ("red", {"granikv_prefix_id": ""}, 400),
])
def test_bind_body_refuses(team: str | None, xargs: dict[str, Any], status: int) -> None:
    with pytest.raises(ApiError) as e:
        bind_body({"vllm_xargs": xargs}, team)
    assert e.value.status == status
