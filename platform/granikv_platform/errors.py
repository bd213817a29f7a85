"""HTTP errors of the platform, OpenAI-shaped: ``{"error": {"message", "type", "code",
"request_id"}}``.

Handlers installed on the app turn ``ApiError``, a missing or wrong API key
(401), registry errors and request validation failures (422, one line per field) into
that shape. Every request has one id (``RequestIds``): the client's ``x-request-id`` when
it is one plain token of at most 128 characters, else one made by Serve's front
(``front.py``) or here; every error body names it, the response carries the same id as
``x-request-id``, and the server's log lines of the request
(Ray Serve's own included) carry it too, so that an error a client reports can be
found in the log.
"""

from __future__ import annotations

import logging
from contextvars import ContextVar
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from ray.exceptions import RayActorError
from ray.serve.exceptions import BackPressureError, DeploymentUnavailableError
from starlette.datastructures import MutableHeaders
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from granikv_engine.prefix_registry import PrefixError
from granikv_platform.auth import AuthError
from granikv_platform.front import REQUEST_ID_HEADER, one_request_id
from granikv_platform.names import REPLICA_HEADER
from granikv_platform.protocol import (
    ErrorItem,
    error_item,
    prefix_error_item,
    public_text,
    validation_message,
)

logger = logging.getLogger("ray.serve")

# The id of the request being served, for its error bodies (set by ``RequestIds``).
REQUEST_ID: ContextVar[str | None] = ContextVar("granikv_request_id", default=None)


class RequestIds:
    """ASGI middleware, outermost: the request's id in ``REQUEST_ID`` and in its
    ``x-request-id`` header, and on every answer the replica that served it
    (``x-granikv-replica``, when ``replica`` is given). The client's id is kept when it
    is one plain token (``front.one_request_id``); behind Serve's front the header is
    always there and one (the front keeps the client's or makes one, and puts it on the
    response). Without it (tests) an id made here is put on the response, in place of
    the client's."""

    def __init__(self, app: ASGIApp, replica: str | None = None) -> None:
        self.app = app
        self.replica = replica.encode() if replica else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid, kept = one_request_id(scope)

        async def send_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                if not kept:
                    MutableHeaders(scope=message)[REQUEST_ID_HEADER] = rid
                if self.replica is not None:
                    message["headers"] = [*message["headers"],
                                          (REPLICA_HEADER.encode(), self.replica)]
            await send(message)

        token = REQUEST_ID.set(rid)
        try:
            await self.app(scope, receive, send_id)
        finally:
            REQUEST_ID.reset(token)


class ApiError(Exception):
    """Raised by route code for a client error; ``status`` is the HTTP code."""

    def __init__(self, status: int, message: str, retry_after_s: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.retry_after_s = retry_after_s


# A replica (or service) that died, is restarting, or is full: worth a retry (503).
REPLICA_LOST = (RayActorError, BackPressureError, DeploymentUnavailableError)


def unavailable(e: Exception) -> ApiError:
    return ApiError(503, f"no replica could take the request ({type(e).__name__}); "
                    "retry shortly", retry_after_s=1)


def error_response(item: ErrorItem) -> JSONResponse:
    """The error as an HTTP answer (``client_error``). A 503 (a replica lost, restarting
    or whose engine died; none free), like a 429 (a team over its share of a replica),
    says when to retry."""
    status, body = client_error(item)
    headers = {"Retry-After": str(RETRY_AFTER_S)} if status in (429, 503) else None
    return JSONResponse(body, status_code=status, headers=headers)


RETRY_AFTER_S = 1


def client_error(item: ErrorItem) -> tuple[int, dict[str, Any]]:
    """(status, body) of ``item`` for a client, with the request's id. A 5xx's own
    text (an engine's, a library's or Ray's exception message, which may name files,
    processes or hosts) is logged with the request id; the client gets that id."""
    status, body = item.wire()
    rid = REQUEST_ID.get()
    err = body["error"]
    if status == 500:
        logger.warning("GraniKV: request %s: internal error answered as 500: %s",
                       rid, err["message"])
        err["message"] = internal_message(rid)
    elif status > 500 and public_text(err["message"]) != err["message"]:
        logger.warning("GraniKV: request %s: answered %d: %s", rid, status,
                       err["message"])
        err["message"] = public_text(err["message"])
    if rid is not None:
        err["request_id"] = rid
    return status, body


def internal_message(rid: str | None) -> str:
    """A 500's text: the request id under which its cause is logged, and nothing of the
    server (no path, host or process: where the logs are is the operator's to know)."""
    return ("internal error: the request was not served; its cause is in the server log "
            f"under request id {rid}")


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api(_: Request, e: ApiError) -> JSONResponse:
        response = error_response(error_item(e.status, e.message))
        if e.retry_after_s is not None:  # replaces the 503's default
            response.headers["Retry-After"] = str(e.retry_after_s)
        return response

    @app.exception_handler(AuthError)
    async def _auth(_: Request, e: AuthError) -> JSONResponse:
        response = error_response(error_item(401, str(e)))
        response.headers["WWW-Authenticate"] = "Bearer"
        return response

    @app.exception_handler(PrefixError)
    async def _prefix(_: Request, e: PrefixError) -> JSONResponse:
        return error_response(prefix_error_item(e))

    @app.exception_handler(HTTPException)
    async def _http(_: Request, e: HTTPException) -> JSONResponse:  # 404 route, 405 ...
        return error_response(error_item(e.status_code, str(e.detail)))

    @app.exception_handler(RayActorError)
    @app.exception_handler(BackPressureError)
    @app.exception_handler(DeploymentUnavailableError)
    async def _lost(request: Request, e: Exception) -> JSONResponse:
        return await _api(request, unavailable(e))

    @app.exception_handler(TimeoutError)
    async def _timeout(_: Request, e: TimeoutError) -> JSONResponse:
        return error_response(error_item(504, "the model did not answer in time"))

    @app.exception_handler(Exception)
    async def _internal(request: Request, e: Exception) -> JSONResponse:  # a bug, a dead replica
        # Starlette runs this handler outside every middleware (its ServerErrorMiddleware):
        # ``RequestIds`` has reset REQUEST_ID, and its id is in the request's headers.
        rid = request.headers.get(REQUEST_ID_HEADER)
        token = REQUEST_ID.set(rid)
        try:
            logger.exception("GraniKV: request %s: unhandled error", rid)
            response = error_response(error_item(500, f"internal error ({type(e).__name__})"))
        finally:
            REQUEST_ID.reset(token)
        if rid is not None:
            response.headers[REQUEST_ID_HEADER] = rid
        return response

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, e: RequestValidationError) -> JSONResponse:
        return error_response(error_item(422, validation_message(e) or "invalid request"))
