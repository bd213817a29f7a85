"""What crosses the Ray boundary between the ingress and the LLM replicas.

Replica methods answer with plain dicts, never raise for a client's mistake:
- ``{"json": body}``: a whole JSON answer (non-streaming OpenAI response, a record);
- ``{"sse": "data: {...}\\n\\n"}``: one server-sent event of a stream;
- ``{"error": {"status", "type", "message"}}``: an HTTP error for the client.
The first item of an answer may also carry ``"headers"``: response headers for the
client (a team chat's ``x-granikv-prefix``).
Errors are OpenAI-shaped on the wire: ``{"error": {"message", "type", "code"}}``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from pydantic import ValidationError

from granikv_engine.prefix_registry import PrefixError

Item = dict[str, Any]

_TYPES = {400: "BadRequestError", 401: "AuthenticationError", 403: "PermissionDeniedError",
          404: "NotFoundError", 405: "MethodNotAllowedError", 409: "ConflictError",
          413: "RequestEntityTooLargeError", 422: "UnprocessableEntityError",
          500: "InternalServerError", 503: "ServiceUnavailableError",
          504: "GatewayTimeoutError"}


# The error type of a team that has no shared context yet (404): clients tell it from
# other 404s by this type, not by the message.
NO_TEAM_CONTEXT = "NoTeamContextError"


def error_item(status: int, message: str, type_: str | None = None) -> Item:
    return {"error": {"status": int(status), "type": type_ or _TYPES.get(status, "Error"),
                      "message": message}}


def prefix_error_item(e: PrefixError) -> Item:
    # PrefixNotFound is a KeyError, whose str() adds quotes: use the message itself.
    return error_item(e.status, str(e.args[0]) if e.args else type(e).__name__)


def validation_message(e: ValidationError | Any) -> str:
    """One line per problem: ``body.messages.0.role: Input should be ...``, of pydantic's
    ``ValidationError`` or anything with its ``errors()`` (FastAPI's
    ``RequestValidationError``)."""
    parts = []
    for err in e.errors():
        loc = ".".join(str(p) for p in err.get("loc", ()))
        parts.append(f"{loc}: {err.get('msg', 'invalid')}" if loc else err.get("msg", ""))
    return "; ".join(parts) or str(e)


def wire_error(item: Item) -> tuple[int, dict[str, Any]]:
    """(HTTP status, OpenAI-style body) of an error item."""
    err = item["error"]
    return err["status"], {"error": {"message": err["message"], "type": err["type"],
                                     "code": err["status"]}}


async def with_headers(items: AsyncIterator[Item],
                       headers: dict[str, str] | None) -> AsyncIterator[Item]:
    """``items`` with ``headers`` added to the first one (an error item stays as it is;
    None: all as they are)."""
    first = True
    async for item in items:
        if first and headers and "error" not in item:
            item = {**item, "headers": {**item.get("headers", {}), **headers}}
        first = False
        yield item
