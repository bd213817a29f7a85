"""HTTP errors of the platform, OpenAI-shaped: ``{"error": {"message", "type", "code"}}``.

Handlers installed on the ingress app turn ``ApiError``, a missing or wrong API key
(401), registry errors and request validation failures (422, one line per field) into
that shape.
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from ray.exceptions import RayActorError
from ray.serve.exceptions import BackPressureError, DeploymentUnavailableError
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse

from granikv_engine.prefix_registry import PrefixError
from granikv_platform.auth import AuthError
from granikv_platform.protocol import (
    ErrorItem,
    error_item,
    prefix_error_item,
    validation_message,
)

logger = logging.getLogger("ray.serve")


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
    """The error as an HTTP answer. A 500's own text (an engine's or a library's
    exception message, which may name files or internals) stays in the log."""
    status, body = item.wire()
    if status == 500:
        logger.warning("GraniKV ingress: internal error answered as 500: %s",
                       body["error"]["message"])
        body["error"]["message"] = INTERNAL_MESSAGE
    return JSONResponse(body, status_code=status)


INTERNAL_MESSAGE = "internal error: the request was not served (details in the server log)"


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api(_: Request, e: ApiError) -> JSONResponse:
        response = error_response(error_item(e.status, e.message))
        if e.retry_after_s is not None:
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
    async def _internal(_: Request, e: Exception) -> JSONResponse:  # a bug or a dead replica
        logger.exception("GraniKV ingress: unhandled error")
        return error_response(error_item(500, f"internal error ({type(e).__name__})"))

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, e: RequestValidationError) -> JSONResponse:
        return error_response(error_item(422, validation_message(e) or "invalid request"))
