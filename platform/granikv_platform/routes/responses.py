"""The Responses API routes (``client.responses.create(...)`` of the OpenAI SDK), on
``/v1`` and on a team's OpenAI root ``/teams/{team}/v1``, where the team's context comes
first and the request binds to its HOT prefix as a team chat does.

``POST /v1/responses`` validates its body with vLLM's ``ResponsesRequest`` (422, one
line per field) and answers JSON, or vLLM's typed events as SSE with ``stream: true``.
Stored responses (``store``, ``previous_response_id``) are the calling team's, in the
platform's database (``responses.py``): ``GET`` and ``DELETE /v1/responses/{id}`` read
and remove them. ``cancel`` (background responses, which the platform does not run) and
``input_items`` answer a 400 that says so.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from fastapi import APIRouter, Header
from starlette.responses import Response

from granikv_platform.answers import answer
from granikv_platform.deps import CurrentIngress, OptionalTeam, RawBody
from granikv_platform.engine_responses import ResponsesRequest
from granikv_platform.errors import ApiError
from granikv_platform.identity import ANONYMOUS, bind_body
from granikv_platform.names import CONTEXT_HEADER

NO_INPUT_ITEMS = ("GET /v1/responses/{id}/input_items is not supported by this platform; "
                  "GET /v1/responses/{id} returns the response")


def router() -> APIRouter:
    """``/v1/responses`` of the calling team (the API key's)."""
    r = APIRouter(tags=["openai"])

    @r.post("/v1/responses")
    async def create(team: OptionalTeam, _: ResponsesRequest, body: RawBody,
                     ing: CurrentIngress) -> Response:
        return await ing.openai("responses", bind_body(body, team))

    _reads(r, lambda team: team or ANONYMOUS)
    return r


def team_router(team: str) -> APIRouter:
    """``/teams/{team}/v1/responses`` (mounted with ``deps.enter_team(team)``)."""
    r = APIRouter(tags=[f"team {team}"])

    @r.post("/v1/responses")
    async def create(_: ResponsesRequest, body: RawBody, ing: CurrentIngress,
                     context: Annotated[str | None, Header(
                         alias=CONTEXT_HEADER, description="the prefix id of the context "
                         "the caller pinned: another one is a 409")] = None) -> Response:
        # The replica prepends the context and binds the request (LLMReplica._team_chat).
        return await ing.openai("team_responses", team, body, context)

    _reads(r, lambda _: team)
    return r


def _reads(r: APIRouter, of: Callable[[str | None], str]) -> None:
    """GET, DELETE, cancel and input_items of a stored response; ``of(caller's team)``:
    the team whose responses they are."""

    @r.get("/v1/responses/{response_id}")
    async def get(response_id: str, team: OptionalTeam, ing: CurrentIngress,
                  stream: bool = False) -> Response:
        if stream:
            raise ApiError(400, "streaming a stored response (stream=true) is not "
                           "supported by this platform: it streams background "
                           "responses, which this platform does not run")
        return answer(await ing.call("stored_response", "get", of(team), response_id))

    @r.delete("/v1/responses/{response_id}")
    async def delete(response_id: str, team: OptionalTeam, ing: CurrentIngress) -> Response:
        return answer(await ing.call("stored_response", "delete", of(team), response_id))

    @r.post("/v1/responses/{response_id}/cancel")
    async def cancel(response_id: str, team: OptionalTeam, ing: CurrentIngress) -> Response:
        return answer(await ing.call("stored_response", "cancel", of(team), response_id))

    @r.get("/v1/responses/{response_id}/input_items")
    async def input_items(response_id: str, _: OptionalTeam) -> Response:
        raise ApiError(400, NO_INPUT_ITEMS)
