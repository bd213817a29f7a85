"""Team routes are refused before their bodies are read.

FastAPI parses a JSON body before it runs a route's dependencies, so the router-level
check of /teams/{team} (``deps.enter_team``) would answer a malformed body from another
team with a 422 that describes the route. This ASGI middleware runs the same identity
check (``identity.resolve_team``) first: another team's, or a key-less, call to
/teams/{team}/... is 401/403 whatever its body. The dependency stays, for a router
mounted without the gate; behind it, it takes the team the gate resolved."""

from __future__ import annotations

from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from granikv_platform.auth import AuthError
from granikv_platform.errors import ApiError, error_response
from granikv_platform.identity import resolve_team
from granikv_platform.protocol import error_item


class TeamGate:
    def __init__(self, app: ASGIApp, teams: frozenset[str]) -> None:
        self.app = app
        self.teams = teams

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        parts = scope.get("path", "").split("/") if scope["type"] == "http" else []
        if len(parts) > 3 and parts[1] == "teams" and parts[2] in self.teams:
            request = Request(scope)  # headers and app state only: the body is untouched
            try:  # the route's dependency (deps.enter_team) reuses this result
                request.state.granikv_team = resolve_team(request, path_team=parts[2])
            except AuthError as e:
                response = error_response(error_item(401, str(e)))
                response.headers["WWW-Authenticate"] = "Bearer"
                await response(scope, receive, send)
                return
            except ApiError as e:
                await error_response(error_item(e.status, e.message))(scope, receive, send)
                return
        await self.app(scope, receive, send)
