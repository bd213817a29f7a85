"""OpenAI-compatible routes: vLLM's own request models validate the bodies (422 with
one line per field); the raw JSON, scoped to the caller's team, goes to a replica.
The Responses API's are in responses.py; /v1/embeddings is a 404 that says why."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.responses import Response
from vllm.entrypoints.openai.engine.protocol import ModelCard, ModelList

from granikv_platform.config import PlatformConfig
from granikv_platform.deps import CurrentIngress, OptionalTeam, RawBody
from granikv_platform.errors import ApiError
from granikv_platform.identity import bind_body
from granikv_platform.openai_bodies import ChatCompletionRequest, CompletionRequest
from granikv_platform.routes import responses

NO_EMBEDDINGS = ("this platform serves a generative model and does not serve embeddings "
                 "(/v1/embeddings); use an embedding model's endpoint")


def model_card(cfg: PlatformConfig) -> ModelCard:
    """The served model as OpenAI lists it: its id (never the server's file path)."""
    return ModelCard(id=cfg.model.model_id, owned_by="granikv", root=cfg.model.model_id,
                     max_model_len=cfg.engine.engine_kwargs.get("max_model_len"))


def model_list(cfg: PlatformConfig) -> ModelList:
    return ModelList(data=[model_card(cfg)])


def find_model(cfg: PlatformConfig, model_id: str) -> ModelCard:
    """``GET /v1/models/{id}``: the card, or an OpenAI-shaped 404."""
    if model_id != cfg.model.model_id:
        raise ApiError(404, f"The model `{model_id}` does not exist.")
    return model_card(cfg)


def router(cfg: PlatformConfig) -> APIRouter:
    r = APIRouter(tags=["openai"])

    @r.get("/v1/models", response_model=ModelList)
    async def models(_: OptionalTeam) -> ModelList:
        return model_list(cfg)

    @r.get("/v1/models/{model_id:path}", response_model=ModelCard)
    async def model(model_id: str, _: OptionalTeam) -> ModelCard:
        return find_model(cfg, model_id)

    @r.post("/v1/chat/completions")
    async def chat(team: OptionalTeam, _: ChatCompletionRequest, body: RawBody,
                   ing: CurrentIngress) -> Response:
        return await ing.openai("chat", bind_body(body, team))

    @r.post("/v1/completions")
    async def completions(team: OptionalTeam, _: CompletionRequest, body: RawBody,
                          ing: CurrentIngress) -> Response:
        return await ing.openai("completions", bind_body(body, team))

    @r.post("/v1/embeddings")
    async def embeddings(_: OptionalTeam) -> Response:
        raise ApiError(404, NO_EMBEDDINGS)

    r.include_router(responses.router())  # POST /v1/responses, GET/DELETE its records
    return r
