"""create_app: the app's FastAPI app for one PlatformConfig, served by every LLM replica
(``replica_http.py``).

Routes:
- OpenAI: GET /v1/models, GET /v1/models/{id}, POST /v1/completions,
  POST /v1/chat/completions (SSE with ``stream: true``); a request binds to a prefix
  with ``vllm_xargs``. The Responses API: POST /v1/responses, GET/DELETE
  /v1/responses/{id} (stored in the platform's database, routes/responses.py);
  /v1/embeddings is a 404 that says why. vLLM's POST /tokenize and POST /detokenize.
- Prefixes of the calling team: POST/GET /v1/prefixes, GET/DELETE /v1/prefixes/{id}.
- Per configured team, under /teams/{team}: PUT/GET /context, GET /v1/models(/{id}),
  POST /v1/chat/completions and POST /v1/responses (the team context first, bound to
  its HOT prefix), GET/DELETE /v1/responses/{id}, POST /v1/completions (scoped to the
  team), and the routers of ``config.team_routers``.
- Operations: GET /metrics (Prometheus), GET /v1/granikv/stats, GET /teams, GET /healthz
  (liveness), GET /readyz (503 until an LLM replica has reported).

Access (``config.auth``, auth.py and identity.py): every route needs an API key except
GET /healthz and GET /readyz, and it is checked before routing (team_gate.py: no path
or team name can be probed without a key); /metrics, /v1/granikv/stats and the OpenAPI
document (/openapi.json, /docs: it lists every team's routes) need the operator key.
Every answer carries the request's id (``x-request-id``, errors.py) and, served by a
replica, that replica's id (``x-granikv-replica``). Bodies over
``limits.max_body_bytes`` are 413; a body that is not one JSON object sent as
``application/json`` is 400 or 415 (body.py), on a route that takes the request; one
that no route takes is 404 (405: another method), whatever its body.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Depends, FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from starlette.responses import HTMLResponse, JSONResponse

from granikv_platform.auth import Authenticator
from granikv_platform.body import JsonBody
from granikv_platform.config import PlatformConfig, TeamConfig
from granikv_platform.deps import Authenticated, Operator, enter_team
from granikv_platform.env import PlatformEnv
from granikv_platform.errors import RequestIds, install_error_handlers
from granikv_platform.limits import BodyLimit
from granikv_platform.routes import openai, ops, prefixes, team_openai, teams, tokens
from granikv_platform.team_gate import TeamGate


def create_app(cfg: PlatformConfig, auth: Authenticator | None = None,
               replica: str | None = None) -> FastAPI:
    """``auth``: default from ``cfg.auth`` (reads the keys file; raises without one
    when keys are required). ``replica``: the id of the replica that serves the app,
    on every answer (``x-granikv-replica``)."""
    app = FastAPI(title="GraniKV platform", version="0.1.0",
                  description="OpenAI-compatible serving with team-scoped HOT prefixes.",
                  openapi_url=None, docs_url=None, redoc_url=None)  # see _document
    app.state.granikv_auth = auth or Authenticator.from_config(
        cfg.auth, PlatformEnv.from_environ().api_keys_file)
    app.add_middleware(JsonBody)  # bodies: one JSON object, or a 4xx that says why
    app.add_middleware(BodyLimit, max_bytes=cfg.limits.max_body_bytes)
    # Outermost: a key, and the path's team, are checked before routing or any body.
    app.add_middleware(TeamGate, teams=frozenset(t.name for t in cfg.teams))
    # outermost: the gate's errors name the request (and the replica) too
    app.add_middleware(RequestIds, replica=replica)
    install_error_handlers(app)
    app.include_router(openai.router(cfg))
    app.include_router(tokens.router())
    app.include_router(prefixes.router())
    app.include_router(ops.router(cfg))
    for path in cfg.extra_routers:  # any valid key (deps.py for finer checks)
        app.include_router(_factory(path)(), dependencies=[Authenticated])
    for team in cfg.teams:
        mount = {"prefix": f"/teams/{team.name}",
                 "dependencies": [Depends(enter_team(team.name))]}  # caller == team
        app.include_router(teams.router(cfg, team), **mount)  # type: ignore[arg-type]
        app.include_router(team_openai.router(cfg, team), **mount)  # type: ignore[arg-type]
        for path in cfg.team_routers:
            app.include_router(_team_factory(path)(team), **mount)  # type: ignore[arg-type]
    _document(app)
    return app


def _document(app: FastAPI) -> None:
    """The OpenAPI document and its Swagger UI, for the operator key only: the document
    names every configured team (its /teams/{team}/... routes)."""

    @app.get("/openapi.json", include_in_schema=False, dependencies=[Operator])
    async def openapi() -> JSONResponse:
        return JSONResponse(app.openapi())

    @app.get("/docs", include_in_schema=False, dependencies=[Operator])
    async def docs() -> HTMLResponse:
        return get_swagger_ui_html(openapi_url="/openapi.json", title=f"{app.title} - docs")


def _factory(path: str) -> Callable[[], APIRouter]:
    return load_object(path, "router factory")  # type: ignore[no-any-return]


def _team_factory(path: str) -> Callable[[TeamConfig], APIRouter]:
    return load_object(path, "router factory")  # type: ignore[no-any-return]


def load_object(path: str, what: str = "object") -> Any:
    """The object a 'module:name' path names (router factories, service classes)."""
    module, _, name = path.partition(":")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"cannot load {what} {path!r}: {e}") from e
