"""Prefix API, scoped to the calling team (its API key).

Ids are the team's own (``registry.scoped_id``): two teams may register the same id,
each for its own prefix, and an id the calling team does not have is 404 on every
route, whether another team uses it or none does; the team's own id taken with other
tokens is 409.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path
from starlette.responses import Response

from granikv_platform.answers import answer
from granikv_platform.deps import CurrentIngress, RequiredTeam
from granikv_platform.schemas import PREFIX_ID_PATTERN, PrefixCreate, PrefixList, PrefixView

PrefixId = Annotated[str, Path(pattern=PREFIX_ID_PATTERN,
                               description="A prefix id of the calling team.")]


def router() -> APIRouter:
    r = APIRouter(prefix="/v1/prefixes", tags=["prefixes"])

    @r.post("", status_code=201, response_model=PrefixView,
            responses={200: {"description": "Already registered (same tokens)."}})
    async def register(team: RequiredTeam, body: PrefixCreate, ing: CurrentIngress) -> Response:
        return answer(await ing.call("register_prefix", team, body.model_dump()))

    @r.get("", response_model=PrefixList)
    async def list_(team: RequiredTeam, ing: CurrentIngress) -> Response:
        return answer(await ing.call("list_prefixes", team))

    @r.get("/{prefix_id}", response_model=PrefixView)
    async def get(team: RequiredTeam, prefix_id: PrefixId, ing: CurrentIngress) -> Response:
        return answer(await ing.call("get_prefix", team, prefix_id))

    @r.delete("/{prefix_id}")
    async def delete(team: RequiredTeam, prefix_id: PrefixId, ing: CurrentIngress) -> Response:
        return answer(await ing.call("delete_prefix", team, prefix_id))

    return r
