"""The extension point for the agents layer: routers from config.extra_routers (at /)
and config.team_routers (at /teams/{team}, per configured team) on the app."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from granikv_platform.app import create_app
from granikv_platform.config import PlatformConfig

HERE = "tests.platform.routers_example"


def config(**kw: object) -> PlatformConfig:
    """``auth: none``: these tests are about mounting (keys: tests/reliability)."""
    return PlatformConfig.model_validate({
        "model": {"model_id": "tiny", "source": "deploy/models/tiny-llama"},
        "engine": {"accelerator": "cpu"}, "teams": [{"name": "red"}, {"name": "blue"}],
        "auth": {"mode": "none"}, **kw})


def test_team_and_extra_routers_are_mounted() -> None:
    app = create_app(config(extra_routers=[f"{HERE}:hello_router"],
                            team_routers=[f"{HERE}:runs_router"]))
    c = TestClient(app)
    assert c.get("/hello").json() == {"hello": "world"}
    assert c.get("/teams/red/runs").json() == {"team": "red", "caller": "red"}
    assert c.get("/teams/blue/runs", headers={"X-GraniKV-Team": "blue"}).status_code == 200
    denied = c.get("/teams/red/runs", headers={"X-GraniKV-Team": "blue"})
    assert denied.status_code == 403 and denied.json()["error"]["code"] == 403
    missing = c.get("/teams/green/runs")  # not a configured team
    assert missing.status_code == 404 and missing.json()["error"]["type"] == "NotFoundError"


def test_a_bad_router_path_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="cannot load router factory"):
        create_app(config(extra_routers=[f"{HERE}:no_such_factory"]))
