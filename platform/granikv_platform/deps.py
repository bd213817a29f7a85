"""FastAPI dependencies for the app's routes, including extra routers:

    from granikv_platform.deps import CurrentIngress, RouteTeam
    def runs_router(team: TeamConfig) -> APIRouter:    # a config.team_routers entry
        r = APIRouter()
        @r.post("/runs")                               # served at /teams/{team}/runs
        async def start(team: RouteTeam, ing: CurrentIngress) -> dict: ...
        return r

Routers under /teams/{team} are mounted with ``enter_team``: before any of their routes
runs, the caller is checked against the path's team (``identity.resolve_team``). Every
dependency here authenticates the caller first (``identity.caller``: the API key), and
declares the bearer scheme in the OpenAPI document.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from ray import serve

from granikv_platform.body import parsed_body
from granikv_platform.errors import ApiError
from granikv_platform.identity import (
    caller,
    optional_team,
    require_operator,
    required_team,
    resolve_team,
)
from granikv_platform.ingress_api import IngressApi


def current_ingress() -> IngressApi:
    """The LLM replica serving this request (its config, hub, methods and services)."""
    return serve.get_replica_context().servable_object  # type: ignore[return-value]


# Documents ``Authorization: Bearer <key>`` in the OpenAPI document; the check itself is
# identity.caller's (OpenAI-shaped 401s, keys reloaded from the keys file).
_bearer = HTTPBearer(auto_error=False, description="A team's API key (or the operator "
                     "key for /metrics and /v1/granikv/stats).")
Bearer = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]


def enter_team(team: str) -> Callable[..., Awaitable[None]]:
    """Router-level dependency of /teams/{team}: the caller must be that team."""

    async def dep(request: Request, _: Bearer) -> None:
        if getattr(request.state, "granikv_team", None) == team:  # checked by TeamGate
            return
        request.state.granikv_team = resolve_team(request, path_team=team) or team

    return dep


async def route_team(request: Request) -> str:
    """The team of the /teams/{team} route being served (checked by ``enter_team``)."""
    team = getattr(request.state, "granikv_team", None)
    if team is None:
        raise RuntimeError("route_team is only for routers mounted under /teams/{team}")
    return str(team)


async def raw_body(request: Request) -> dict[str, Any]:
    """The JSON object sent, as ``body.JsonBody`` read and checked it (routes also
    declare its model, which validates it)."""
    body = parsed_body(request.scope)
    if body is None:
        raise ApiError(400, "the request body is empty: send a JSON object with "
                       "'Content-Type: application/json'")
    return body


async def _required_team(request: Request, _: Bearer) -> str:
    return await required_team(request)


async def _optional_team(request: Request, _: Bearer) -> str | None:
    return await optional_team(request)


async def _operator(request: Request, _: Bearer) -> None:
    require_operator(request)


async def _authenticated(request: Request, _: Bearer) -> None:
    caller(request)


CurrentIngress = Annotated[IngressApi, Depends(current_ingress)]
RequiredTeam = Annotated[str, Depends(_required_team)]
OptionalTeam = Annotated[str | None, Depends(_optional_team)]
Operator = Depends(_operator)  # route dependencies=[Operator]: operator keys only
Authenticated = Depends(_authenticated)  # any valid key
RouteTeam = Annotated[str, Depends(route_team)]
RawBody = Annotated[dict[str, Any], Depends(raw_body)]
