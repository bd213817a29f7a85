"""What an LLM replica's methods answer, to its own routes and across a Ray handle (the
agents' run service calls the replicas; the replicas' routes call the run service).

These methods answer with items and never raise for a client's mistake. An answer is
one item, or a stream of them:
- ``JsonItem``: a whole JSON answer (a non-streaming OpenAI response, a record), with
  its HTTP status;
- ``SseItem``: server-sent events of a stream (one or more, concatenated);
- ``ErrorItem``: an HTTP error for the client (first item: the response's status; later
  in a stream: an error event, the status being sent).
The first item may carry ``headers``: response headers for the client (a team chat's
``x-granikv-prefix``). Errors are OpenAI-shaped on the wire:
``{"error": {"message", "type", "code"}}``.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from granikv_engine.prefix_registry import PrefixError


@dataclass(frozen=True, slots=True)
class JsonItem:
    body: Any  # a JSON value
    status: int = 200
    headers: Mapping[str, str] | None = None


@dataclass(frozen=True, slots=True)
class SseItem:
    text: str  # "data: {...}\n\n", one or more events
    headers: Mapping[str, str] | None = None


@dataclass(frozen=True, slots=True)
class ErrorItem:
    status: int
    type: str
    message: str

    def wire(self) -> tuple[int, dict[str, Any]]:
        """(HTTP status, OpenAI-style body)."""
        return self.status, {"error": {"message": self.message, "type": self.type,
                                       "code": self.status}}


Item = JsonItem | SseItem | ErrorItem

_TYPES = {400: "BadRequestError", 401: "AuthenticationError", 403: "PermissionDeniedError",
          404: "NotFoundError", 405: "MethodNotAllowedError", 409: "ConflictError",
          413: "RequestEntityTooLargeError", 415: "UnsupportedMediaTypeError",
          422: "UnprocessableEntityError", 429: "RateLimitError",
          500: "InternalServerError", 503: "ServiceUnavailableError",
          504: "GatewayTimeoutError"}


# The error type of a team that has no shared context yet (404): clients tell it from
# other 404s by this type, not by the message.
NO_TEAM_CONTEXT = "NoTeamContextError"


def error_item(status: int, message: str, type_: str | None = None) -> ErrorItem:
    return ErrorItem(int(status), type_ or _TYPES.get(status, "Error"), message)


def prefix_error_item(e: PrefixError) -> ErrorItem:
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


# What Ray puts in its errors' text and a client has no use for: process ids, node
# addresses, actor / node / worker ids, task names (``ray::Class.method()``).
_RAY_DETAIL = re.compile(r"\bpid[=:]\s*\d+|\bip[=:]\s*\S+|\b(?:actor|node|worker|job|task)_id\b"
                         r"|\bray::|\bclass_name:|\b\d{1,3}(?:\.\d{1,3}){3}\b")
WITHHELD = "(details in the server log)"


def public_text(text: str) -> str:
    """``text`` for a client: cut before the first line that holds one of Ray's
    internals (the rest stays in the server log). Text without them is unchanged."""
    if _RAY_DETAIL.search(text) is None:
        return text
    kept: list[str] = []
    for line in text.splitlines():
        m = _RAY_DETAIL.search(line)
        if m is None:
            kept.append(line)
            continue
        head = line[:m.start()].rstrip(" \t(,;:[")
        if head.strip():
            kept.append(head)
        break
    return " ".join(" ".join(kept).split() + [WITHHELD])


def public_errors(value: Any) -> Any:
    """``value`` (a JSON value) with every string under an ``error`` or ``message`` key
    made ``public_text``: a failed run's record and its status event carry the error
    that ended it."""
    if isinstance(value, dict):
        return {k: public_text(v) if k in ("error", "message") and isinstance(v, str)
                else public_errors(v) for k, v in value.items()}
    if isinstance(value, list):
        return [public_errors(v) for v in value]
    return value


def has_ray_detail(text: str) -> bool:
    return _RAY_DETAIL.search(text) is not None


def headed(item: Item, headers: Mapping[str, str] | None) -> Item:
    """``item`` with ``headers`` added (an error item stays as it is)."""
    if not headers or isinstance(item, ErrorItem):
        return item
    return dataclasses.replace(item, headers={**(item.headers or {}), **headers})


async def with_headers(items: AsyncIterator[Item],
                       headers: Mapping[str, str] | None) -> AsyncIterator[Item]:
    """``items`` with ``headers`` added to the first one (an error item stays as it is;
    None: all as they are)."""
    first = True
    async for item in items:
        if first:
            item = headed(item, headers)
        first = False
        yield item
