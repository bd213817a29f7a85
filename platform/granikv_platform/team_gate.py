"""Callers are authenticated before routing, and team routes refused before their bodies
are read.

An ASGI middleware, outermost on the app. Every path but the open ones
(``OPEN_PATHS``: /healthz, /readyz and the OpenAPI document) needs a valid API key
(``identity.caller``): without one the answer is 401 whatever the path, so that neither
routes nor team names (/teams/{team}/...) can be probed without a key. Under
/teams/{team}/ of a configured team the caller must also be that team
(``identity.resolve_team``): another team's call is 403 whatever its body, where FastAPI
would parse a JSON body before the router's dependency (``deps.enter_team``) runs. The
dependency stays, for a router mounted without the gate; behind it, it takes the team
the gate resolved."""

from __future__ import annotations

from starlette._utils import get_route_path
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from granikv_platform.auth import AuthError
from granikv_platform.errors import ApiError, error_response
from granikv_platform.identity import caller, resolve_team
from granikv_platform.protocol import error_item

OPEN_PATHS = frozenset({"/healthz", "/readyz", "/openapi.json", "/docs", "/docs/oauth2-redirect",
                        "/redoc"})


class TeamGate:
    def __init__(self, app: ASGIApp, teams: frozenset[str]) -> None:
        self.app = app
        self.teams = teams

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = get_route_path(scope)
        if path not in OPEN_PATHS:
            request = Request(scope)  # headers and app state only: the body is untouched
            try:  # the routes' dependencies (deps.py) reuse these results
                caller(request)
                parts = path.split("/")
                if len(parts) > 3 and parts[1] == "teams" and parts[2] in self.teams:
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
