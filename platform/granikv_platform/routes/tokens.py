"""``POST /tokenize`` and ``POST /detokenize``, as ``vllm serve`` has them: a replica's
own tokenizer and chat template (vLLM's ``ServingTokenization``) answer, so the counts
are the ones the engine sees. Any valid key may call them."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from starlette.responses import JSONResponse
from vllm.entrypoints.serve.tokenize.protocol import (
    DetokenizeRequest,
    DetokenizeResponse,
    TokenizeRequest,
    TokenizeResponse,
)

from granikv_platform.deps import Ing, OptionalTeam, RawBody
from granikv_platform.errors import error_response


def router() -> APIRouter:
    r = APIRouter(tags=["tokens"])

    @r.post("/tokenize", response_model=TokenizeResponse)
    async def tokenize(_: OptionalTeam, __: TokenizeRequest, body: RawBody,
                       ing: Ing) -> JSONResponse:
        return _answer(await ing.call("tokenize", body))

    @r.post("/detokenize", response_model=DetokenizeResponse)
    async def detokenize(_: OptionalTeam, __: DetokenizeRequest, body: RawBody,
                         ing: Ing) -> JSONResponse:
        return _answer(await ing.call("detokenize", body))

    return r


def _answer(item: dict[str, Any]) -> JSONResponse:
    return error_response(item) if "error" in item else JSONResponse(item["json"])
