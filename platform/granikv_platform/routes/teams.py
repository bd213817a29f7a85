"""Routes of one configured team, mounted at /teams/{team}.

``/teams/{team}/v1`` is an OpenAI root for that team's agents
(``ChatOpenAI(base_url=f"{url}/teams/{team}/v1")``): every chat gets the team's
context first, as a system message, and is bound to its HOT prefix. The context is
registered as that system message rendered alone through the chat template, so the
rendered conversation starts with exactly the prefix's tokens (a boundary-safe template
ends every message with a special token).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header
from starlette.responses import Response
from vllm.entrypoints.openai.engine.protocol import ModelList

from granikv_platform.answers import answer
from granikv_platform.config import PlatformConfig, TeamConfig
from granikv_platform.deps import CurrentIngress, RawBody
from granikv_platform.names import CONTEXT_HEADER
from granikv_platform.openai_bodies import ChatCompletionRequest
from granikv_platform.routes.openai import model_list
from granikv_platform.schemas import TeamContext, TeamContextIn


def router(cfg: PlatformConfig, team: TeamConfig) -> APIRouter:
    r = APIRouter(tags=[f"team {team.name}"])  # mounted with deps.enter_team(team)

    @r.put("/context", response_model=TeamContext)
    async def put_context(body: TeamContextIn, ing: CurrentIngress) -> Response:
        return answer(await ing.call("set_team_context", team.name, body.text))

    @r.get("/context", response_model=TeamContext)
    async def get_context(ing: CurrentIngress) -> Response:
        return answer(await ing.call("get_team_context", team.name))

    @r.get("/v1/models", response_model=ModelList)
    async def models() -> ModelList:
        return model_list(cfg)

    @r.post("/v1/chat/completions")
    async def chat(_: ChatCompletionRequest, body: RawBody, ing: CurrentIngress,
                   context: Annotated[str | None, Header(
                       alias=CONTEXT_HEADER, description="the prefix id of the context the "
                       "caller pinned: another one is a 409")] = None) -> Response:
        # The replica prepends the context and binds the request (LLMReplica.team_chat).
        return await ing.openai("team_chat", team.name, body, context)

    return r
