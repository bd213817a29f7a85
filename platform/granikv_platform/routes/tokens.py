"""``POST /tokenize`` and ``POST /detokenize``, as ``vllm serve`` has them: a replica's
own tokenizer and chat template (vLLM's ``ServingTokenization``) answer, so the counts
are the ones the engine sees. Any valid key may call them."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.responses import Response
from vllm.entrypoints.serve.tokenize.protocol import (
    DetokenizeRequest,
    DetokenizeResponse,
    TokenizeRequest,
    TokenizeResponse,
)

from granikv_platform.answers import answer
from granikv_platform.deps import CurrentIngress, OptionalTeam, RawBody


def router() -> APIRouter:
    r = APIRouter(tags=["tokens"])

    @r.post("/tokenize", response_model=TokenizeResponse)
    async def tokenize(_: OptionalTeam, __: TokenizeRequest, body: RawBody,
                       ing: CurrentIngress) -> Response:
        return answer(await ing.call("tokenize", body))

    @r.post("/detokenize", response_model=DetokenizeResponse)
    async def detokenize(_: OptionalTeam, __: DetokenizeRequest, body: RawBody,
                         ing: CurrentIngress) -> Response:
        return answer(await ing.call("detokenize", body))

    return r
