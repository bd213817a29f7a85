"""Router factories as the agents layer will write them (used by test_extension.py)."""

from __future__ import annotations

from fastapi import APIRouter

from granikv_platform.config import TeamConfig
from granikv_platform.deps import RouteTeam


def runs_router(team: TeamConfig) -> APIRouter:
    r = APIRouter()

    @r.get("/runs")
    async def runs(caller: RouteTeam) -> dict[str, str]:
        return {"team": team.name, "caller": caller}

    return r


def hello_router() -> APIRouter:
    r = APIRouter()

    @r.get("/hello")
    async def hello() -> dict[str, str]:
        return {"hello": "world"}

    return r
