"""``/teams/{team}/runs``: the agents' REST routes, mounted by the platform per team
(``config.team_routers: ["granikv_agents.rest:runs_router"]``).

    POST /teams/{team}/runs                {"spec_name": "review"} | {"spec": {...}}
    GET  /teams/{team}/runs                the team's runs (?limit=&offset=, oldest first)
    GET  /teams/{team}/runs/{id}           status, context pin, turns, result
    GET  /teams/{team}/runs/{id}/events    server-sent events (Last-Event-ID / ?after=)
    POST /teams/{team}/runs/{id}/resume    continue a failed or interrupted run

and LangGraph Server's assistants, threads and runs (``threads/routes.py``).

The platform checks the caller against the team before these run (``enter_team``). They
forward to the run service (``service.RunService``) through its Serve handle; a run id
or spec name of another team is 404, as an unknown one is (as for prefixes).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Path, Query
from starlette.responses import Response

from granikv_agents.schemas import RUN_ID_PATTERN, RunCreate
from granikv_agents.service_handle import service as _service
from granikv_agents.threads.routes import threads_router
from granikv_platform.answers import answer, stream_answer
from granikv_platform.config import TeamConfig
from granikv_platform.database import MAX_ROWS
from granikv_platform.deps import CurrentIngress
from granikv_platform.errors import ApiError

RunId = Annotated[str, Path(pattern=RUN_ID_PATTERN, description="A run of this team.")]


def runs_router(team: TeamConfig) -> APIRouter:
    r = APIRouter(tags=[f"team {team.name}: runs"])

    @r.post("/runs", status_code=201)
    async def start(body: RunCreate, ing: CurrentIngress) -> Response:
        if body.spec is not None and body.spec.team != team.name:
            raise ApiError(403, f"the spec is team {body.spec.team!r}'s; team "
                           f"{team.name!r} may not run it")
        return answer(await _service(ing).start.remote(team.name, body.wire()))

    @r.get("/runs")
    async def list_runs(ing: CurrentIngress, limit: Annotated[int, Query(ge=1, le=1000)] = 100,
                        offset: Annotated[int, Query(ge=0, le=MAX_ROWS)] = 0) -> Response:
        return answer(await _service(ing).list_runs.remote(team.name, limit, offset))

    @r.get("/runs/{run_id}")
    async def get(run_id: RunId, ing: CurrentIngress) -> Response:
        return answer(await _service(ing).get.remote(team.name, run_id))

    @r.post("/runs/{run_id}/resume")
    async def resume(run_id: RunId, ing: CurrentIngress) -> Response:
        return answer(await _service(ing).resume.remote(team.name, run_id))

    @r.get("/runs/{run_id}/events")
    async def events(run_id: RunId, ing: CurrentIngress,
                     after: Annotated[int, Query(ge=0, description="Events after this "
                                                 "seq.")] = 0,
                     last_event_id: Annotated[int | None, Header()] = None) -> Response:
        return await stream_answer(_service(ing).options(stream=True).events.remote(
            team.name, run_id, max(after, last_event_id or 0)))

    r.include_router(threads_router(team.name))
    return r
