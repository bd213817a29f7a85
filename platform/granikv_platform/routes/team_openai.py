"""The rest of a team's OpenAI root (``/teams/{team}/v1``), next to its chat route:
``GET /v1/models/{id}``, ``POST /v1/completions``, the Responses API (responses.py: the
team's context first, bound to its HOT prefix, as in a team chat) and
``/v1/embeddings`` (a 404 that says why).

A completion's prompt is the client's own text or token ids (no chat template, so no
team context is put in front of it); it is scoped to the team, and binds to one of the
team's prefixes with ``vllm_xargs: {"granikv_prefix_id": ...}`` as on ``/v1``.
"""

from __future__ import annotations

from fastapi import APIRouter
from starlette.responses import Response
from vllm.entrypoints.openai.engine.protocol import ModelCard

from granikv_platform.config import PlatformConfig, TeamConfig
from granikv_platform.deps import CurrentIngress, RawBody
from granikv_platform.errors import ApiError
from granikv_platform.identity import bind_body
from granikv_platform.openai_bodies import CompletionRequest
from granikv_platform.routes import responses
from granikv_platform.routes.openai import NO_EMBEDDINGS, find_model


def router(cfg: PlatformConfig, team: TeamConfig) -> APIRouter:
    r = APIRouter(tags=[f"team {team.name}"])  # mounted with deps.enter_team(team)

    @r.get("/v1/models/{model_id:path}", response_model=ModelCard)
    async def model(model_id: str) -> ModelCard:
        return find_model(cfg, model_id)

    @r.post("/v1/completions")
    async def completions(_: CompletionRequest, body: RawBody, ing: CurrentIngress) -> Response:
        return await ing.openai("completions", bind_body(body, team.name))  # type: ignore[no-any-return]

    @r.post("/v1/embeddings")
    async def embeddings() -> Response:
        raise ApiError(404, NO_EMBEDDINGS)

    r.include_router(responses.team_router(team.name))
    return r
