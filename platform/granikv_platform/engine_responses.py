"""The Responses API through vLLM's own ``OpenAIServingResponses``: request validation
(422, one line per field), the chat template rendering, ``vllm_xargs`` ->
``SamplingParams.extra_args``, and vLLM's typed events as SSE (``event: <type>``), as
``vllm serve`` answers ``POST /v1/responses``. ``EngineHost`` calls it; what is stored
and continued is the platform's (``responses.py``): vLLM gets every request with its
whole conversation as input, ``store`` false and no ``previous_response_id``.

vLLM's serving object renders a request through ``online_renderer.preprocess_chat``
(``OpenAIServingResponses._make_request``). ``install`` gives that one serving object a
renderer of its own (``_Renderer``), which runs vLLM's and then, on the rendered tokens,
what chat's renderer runs (``team_splice.splice_context``, ``InputChecks``): a team's
context spliced in as tokens and the request bound to its HOT prefix, and the checks
every prompt passes before the engine. The attribute replaced is
``OpenAIServingResponses.online_renderer`` (vLLM 0.26); nothing else of vLLM is changed.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

from pydantic import ValidationError, model_validator
from vllm.config import ModelConfig
from vllm.entrypoints.openai.engine.protocol import ErrorResponse
from vllm.entrypoints.openai.responses import protocol
from vllm.entrypoints.serve.utils.error_response import create_error_response
from vllm.exceptions import VLLMValidationError
from vllm.renderers.params import TokenizeParams

from granikv_platform.input_checks import InputChecks
from granikv_platform.openai_bodies import TypeErrorsInvalid
from granikv_platform.protocol import Item, JsonItem, SseItem, error_item, validation_message
from granikv_platform.team_splice import ContextSplice

logger = logging.getLogger("ray.serve")
FAILED = "the request failed in the engine before it finished"


class ResponsesRequest(TypeErrorsInvalid, protocol.ResponsesRequest):
    """vLLM's model, with a ``TypeError`` raised while validating a validation error
    (as ``openai_bodies.py`` does for chat), and rendered without the tokenizer's
    special tokens, as a chat is (``ChatCompletionRequest.add_special_tokens`` is false):
    vLLM 0.26's ``build_tok_params`` leaves them on, so a template that writes
    ``bos_token`` got a second BOS, and the prompt matched neither a chat's nor a team
    context's tokens."""

    def build_tok_params(self, model_config: ModelConfig) -> TokenizeParams:
        return dataclasses.replace(super().build_tok_params(model_config),
                                   add_special_tokens=False)

    @model_validator(mode="before")
    @classmethod
    def _null_is_the_default(cls, data: Any) -> Any:
        """A field sent as null takes its default, as OpenAI reads it: vLLM's request
        model takes null where its response model does not (``background``: a 500 in
        the middle of a stream, from ``ResponsesResponse.from_request``)."""
        if not isinstance(data, dict):
            return data
        fields = cls.model_fields
        return {k: v for k, v in data.items()
                if v is not None or k not in fields or fields[k].default is None}

    @property
    def max_tokens(self) -> int | None:
        """``max_output_tokens`` under chat's name, which ``InputChecks`` reads."""
        return self.max_output_tokens


def install(serving: Any, checks: InputChecks) -> None:
    """Give ``serving`` (vLLM's ``OpenAIServingResponses``) the platform's renderer."""
    serving.online_renderer = _Renderer(serving.online_renderer, serving, checks)


class _Renderer:
    """vLLM's ``OnlineRenderer`` for one serving object, whose ``preprocess_chat``
    splices a team's context (the request's ``_granikv_splice``) and checks the
    rendered prompt. Everything else is the shared renderer's."""

    def __init__(self, inner: Any, serving: Any, checks: InputChecks) -> None:
        self._inner = inner
        self._serving = serving
        self._checks = checks

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def preprocess_chat(self, request: Any, messages: list[Any], *args: Any,
                              **kwargs: Any) -> Any:
        out = await self._inner.preprocess_chat(request, messages, *args, **kwargs)
        found: ContextSplice | None = getattr(request, "_granikv_splice", None)
        if found is not None:
            out = await self._spliced(found, request, messages, out, args, kwargs)
        why = self._checks.problem(request, out[1], self._serving)
        if why is not None:
            logger.warning("request refused before the engine: %s", why)
            raise VLLMValidationError(why, parameter="input")
        return out

    async def _spliced(self, found: ContextSplice, request: Any, messages: list[Any],
                       out: Any, args: Any, kwargs: Any) -> Any:
        """As ``splice_context``: the context's tokens in place of the placeholder's, or
        (the placeholder not found) the request rendered again with the context's text."""
        if await found.into(request, out[1]):
            return out
        messages[0] = {"role": "system", "content": found.text}
        out = await self._inner.preprocess_chat(request, messages, *args, **kwargs)
        found.judge(out[1])
        return out


async def responses(serving: Any, body: dict[str, Any],
                    splice_: ContextSplice | None = None) -> AsyncIterator[Item]:
    """``POST /v1/responses`` of ``vllm serve`` for ``body``, as items: one JSON answer,
    or the typed events as SSE (one item each)."""
    if serving is None:
        yield error_item(404, "this model does not serve the Responses API")
        return
    try:
        request = ResponsesRequest.model_validate(body)
    except ValidationError as e:
        yield error_item(422, validation_message(e))
        return
    why = unsupported_input(request.input)
    if why is not None:
        yield error_item(400, why)
        return
    if splice_ is not None:  # read by _Renderer.preprocess_chat
        request._granikv_splice = splice_  # type: ignore[attr-defined]
    try:
        out = await serving.create_responses(request, None)
    except Exception as e:  # vllm serve's exception handlers, as items
        out = create_error_response(e)
        logger.warning("responses request failed (%d): %r", out.error.code, e,
                       exc_info=e if out.error.code >= 500 else None)
    if isinstance(out, ErrorResponse):
        yield error_item(out.error.code, out.error.message, out.error.type)
    elif hasattr(out, "__aiter__"):
        async for item in _events(out):
            yield item
    else:
        yield JsonItem(out.model_dump(mode="json", by_alias=True))


# The input items a text model's conversation is made of (vLLM's
# ``construct_chat_messages_with_tool_call``): any other item (a built-in tool's call, a
# configuration update, ...) it passes to the chat template as it is, which fails.
INPUT_ITEMS = ("message", "function_call", "function_call_output", "reasoning")
ROLES = ("user", "system", "developer", "assistant")


def unsupported_input(given: Any) -> str | None:
    """Why an input (a string, or items as vLLM validated them: dicts and models) is
    not one this platform serves; None if it is."""
    if isinstance(given, str):
        return None
    for item in given:
        get = item.get if isinstance(item, dict) else lambda k, o=item: getattr(o, k, None)
        kind, role = get("type"), get("role")
        if kind in (None, "message") and role in ROLES:
            continue
        if kind in INPUT_ITEMS and kind != "message":
            continue
        what = f"type {kind!r}" if kind not in (None, "message") else f"role {role!r}"
        return (f"input items of {what} are not supported by this platform: give "
                f"messages (role {', '.join(ROLES)}) and {', '.join(INPUT_ITEMS[1:])} items")
    return None


async def _events(events: AsyncIterator[Any]) -> AsyncIterator[Item]:
    """vLLM's events as SSE, as its route sends them. A stream that raises, or ends
    before ``response.completed``, ends with an error event (``event: error``, the
    OpenAI SDK raises it): vLLM's own error for a failed generation is not one of its
    stream's event types, and validating it raises (serving.py's GenerationError
    branch)."""
    completed = False
    try:
        async for event in events:
            kind = getattr(event, "type", "unknown")
            completed = completed or kind in ("response.completed", "response.incomplete",
                                              "response.failed")
            yield SseItem(f"event: {kind}\ndata: "
                          f"{event.model_dump_json(indent=None, by_alias=True)}\n\n")
    except Exception as e:
        logger.warning("a responses stream failed: %r", e, exc_info=e)
        yield SseItem(error_event(FAILED))
        return
    if not completed:
        logger.warning("a responses stream ended before response.completed")
        yield SseItem(error_event(FAILED))


def error_event(message: str, status: int = 500, type_: str = "InternalServerError") -> str:
    """An error event of a Responses stream, in the platform's error shape (so that the
    replica's dead-engine and public-text rewriting find it, as in a chat stream)."""
    return "event: error\ndata: " + json.dumps(
        {"error": {"message": message, "type": type_, "code": status}}) + "\n\n"
