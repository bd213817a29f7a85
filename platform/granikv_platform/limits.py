"""Request limits (``config.limits``), each refused with a 4xx that names it.

- Body size: ``BodyLimit``, an ASGI middleware of the app. 413 from the
  Content-Length header before anything is read, or as soon as a streamed body passes
  the limit.
- max_tokens (a response's ``max_output_tokens``) and n: ``generation_body``, applied
  by the LLM replica to every chat, completion and response (HTTP routes and the
  agents' Serve-handle calls alike). The limit caps what a request asks for; a request
  that asks for nothing gets vLLM's default (what fits in max_model_len after its
  prompt), as from ``vllm serve``.
- Per-token work: ``per_token_work`` (from ``generation_body``). Some fields cost work
  for every token generated, in the output path or the engine core that every team's
  requests share: a request with 100,000 ``stop`` strings slows every other team's
  streams. Their count and size are bounded (``stop``, ``stop_token_ids``,
  ``bad_words``, ``logit_bias``, ``repetition_detection``); vLLM itself bounds
  ``logprobs``, ``top_logprobs`` and ``logprob_token_ids`` (``max_logprobs``).
- Prompt and prefix tokens: counted where the tokens are known, in the replica
  (``EngineHost`` after the chat template; ``LLMReplica`` for prefixes).
"""

from __future__ import annotations

from typing import Any, TypeGuard

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from granikv_platform.config import LimitsConfig
from granikv_platform.errors import error_response
from granikv_platform.protocol import error_item


class BodyTooLarge(HTTPException):
    """An HTTPException, so that FastAPI's body reader lets it through unchanged."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"the request body exceeds {limit} bytes "
                         "(limits.max_body_bytes)")


class BodyLimit:
    """413 for a body over ``max_bytes``, announced (Content-Length) or streamed."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await _send_413(scope, receive, send, self.max_bytes)
            return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise BodyTooLarge(self.max_bytes)  # the app's handler answers 413
            return message

        await self.app(scope, counted, send)


async def _send_413(scope: Scope, receive: Receive, send: Send, limit: int) -> None:
    """The app's own error answer (``errors.error_response``: its body names the
    request's id, as every error body does); the connection is closed after it, the
    unread body not drained."""
    response = error_response(error_item(413, str(BodyTooLarge(limit).detail)))
    response.headers["connection"] = "close"
    await response(scope, receive, send)


class LimitExceeded(ValueError):
    """A request over a limit (HTTP 400)."""


def generation_body(body: dict[str, Any], limits: LimitsConfig) -> dict[str, Any]:
    """``body`` unchanged; LimitExceeded when it asks for more than a limit."""
    caps = {"max_tokens": ("max_tokens", limits.max_tokens),
            "max_completion_tokens": ("max_tokens", limits.max_tokens),
            "max_output_tokens": ("max_tokens", limits.max_tokens),  # the Responses API's
            "n": ("max_choices", limits.max_choices),
            "best_of": ("max_choices", limits.max_choices)}
    for key, (name, limit) in caps.items():
        value = body.get(key)
        if _number(value) and value > limit:
            raise LimitExceeded(f"{key} {value} exceeds this platform's limit "
                                f"({limit}, limits.{name})")
    per_token_work(body, limits)
    return body


def per_token_work(body: dict[str, Any], limits: LimitsConfig) -> None:
    """LimitExceeded when a field paid for at every generated token is over its limit.

    Only well-typed values are counted; vLLM's own validation answers the others (422)."""
    stop = body.get("stop")
    stops = [stop] if isinstance(stop, str) else stop
    if isinstance(stops, list):
        _at_most("stop", "strings", len(stops), limits.max_stop, "max_stop")
        _at_most("stop", "characters in all", _chars(stops), limits.max_stop_chars,
                 "max_stop_chars")
    words = body.get("bad_words")
    if isinstance(words, list):
        _at_most("bad_words", "words", len(words), limits.max_bad_words, "max_bad_words")
        _at_most("bad_words", "characters in all", _chars(words),
                 limits.max_bad_words_chars, "max_bad_words_chars")
    for key, limit, name in (("stop_token_ids", limits.max_stop_token_ids,
                              "max_stop_token_ids"),
                             ("logit_bias", limits.max_logit_bias, "max_logit_bias")):
        value = body.get(key)
        if isinstance(value, list | dict):
            _at_most(key, "entries", len(value), limit, name)
    detection = body.get("repetition_detection")
    if isinstance(detection, dict) and _number(size := detection.get("max_pattern_size")):
        _at_most("repetition_detection.max_pattern_size", "tokens", size,
                 limits.max_repetition_pattern, "max_repetition_pattern")


def _at_most(key: str, what: str, value: int | float, limit: int, name: str) -> None:
    if value > limit:
        raise LimitExceeded(f"{key}: {value} {what} exceeds this platform's limit "
                            f"({limit}, limits.{name})")


def _chars(values: list[Any]) -> int:
    return sum(len(v) for v in values if isinstance(v, str))


def _number(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)
