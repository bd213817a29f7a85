"""JsonBody: a request body is one well-formed JSON object, or a 4xx that says why.

An ASGI middleware of the app. Every POST, PUT and PATCH body that is not empty
is read once, before any route or dependency sees it, and refused when it is:

- sent without ``Content-Type: application/json`` (or ``+json``), or in another
  charset than UTF-8: 415;
- not UTF-8, not JSON, truncated, or JSON beyond RFC 8259 (``NaN``, ``Infinity``): 400;
- not an object at the top level, nested deeper than ``MAX_DEPTH``, holding a number
  that does not fit in 64 bits, or a string with a lone UTF-16 surrogate (``"\\ud800"``:
  no tokenizer can encode it): 400.

These are checks of a route's body: a request that no route takes (its path, or its
method) goes on to the router, which answers 404 (or 405), whatever its body.

The parsed object is kept on the request (``parsed_body``, read by ``deps.RawBody``) and
the bytes are handed on unchanged, so FastAPI's and vLLM's request models validate the
same body (422, one line per field). An empty body goes on as it is: a route that needs
one answers 400 or 422 (``deps.raw_body``, FastAPI's "Field required").
"""

from __future__ import annotations

import json
import math
import re
from email.message import Message as MimeHeader
from typing import Any

from starlette.requests import ClientDisconnect
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from granikv_platform.errors import error_response
from granikv_platform.limits import BodyTooLarge
from granikv_platform.protocol import error_item

MAX_DEPTH = 64  # objects and arrays; OpenAI bodies nest 6 deep (tools' JSON schemas more)
MAX_INT = 2**63 - 1  # integers beyond int64 reach no engine field intact
_STATE_KEY = "granikv_body"
_SURROGATE = re.compile("[\ud800-\udfff]")
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


class BadBody(ValueError):
    """A body refused before routing; ``status`` is 400 or 415."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def parsed_body(scope: Scope) -> dict[str, Any] | None:
    """The JSON object JsonBody read from this request (None: the body was empty)."""
    return scope.get("state", {}).get(_STATE_KEY)  # type: ignore[no-any-return]


class JsonBody:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in _BODY_METHODS:
            await self.app(scope, receive, send)
            return
        try:
            raw = await _read(receive)
            if raw:
                scope.setdefault("state", {})[_STATE_KEY] = parse(raw, _content_type(scope))
        except ClientDisconnect:
            return
        except BodyTooLarge as e:  # raised by limits.BodyLimit's receive
            await error_response(error_item(413, str(e.detail)))(scope, receive, send)
            return
        except BadBody as e:
            if _routed(scope):
                await error_response(error_item(e.status, e.message))(scope, receive, send)
                return
            raw = b""  # no route takes it: the app answers 404 (or 405), not the body's 4xx
        await self.app(scope, _replay(raw, receive), send)


def _routed(scope: Scope) -> bool:
    """Whether a route of the app takes this method and path (as its router would
    choose one). Asked only of a refused body: the checks are those of a route's body,
    and a request that no route takes is the router's to answer."""
    router = getattr(scope.get("app"), "router", None)
    routes = getattr(router, "routes", None)
    if routes is None:  # not under a Starlette app: every path counts as routed
        return True
    return any(route.matches(scope)[0] == Match.FULL for route in routes)


def parse(raw: bytes, content_type: str | None) -> dict[str, Any]:
    """The body as a JSON object; BadBody says what is wrong with it."""
    _check_media_type(content_type)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BadBody(400, f"the body is not valid UTF-8 (byte 0x{raw[e.start]:02x} at "
                      f"offset {e.start})") from None
    try:
        value = json.loads(text, parse_constant=_no_constant, parse_float=_finite_float)
    except json.JSONDecodeError as e:
        where = "ends too early" if e.pos >= len(text.rstrip()) else f"at offset {e.pos}"
        raise BadBody(400, f"the body is not valid JSON: {e.msg} ({where})") from None
    except RecursionError:
        raise BadBody(400, f"the body nests deeper than {MAX_DEPTH} levels") from None
    except ValueError as e:  # a constant, an overflowing float, an over-long integer
        raise BadBody(400, f"the body is not valid JSON: {_short(e)}") from None
    if not isinstance(value, dict):
        raise BadBody(400, f"the body must be a JSON object, not {_json_type(value)}")
    _check_values(value)
    return value


def _check_media_type(content_type: str | None) -> None:
    if content_type is None:
        raise BadBody(415, "send the body with 'Content-Type: application/json'")
    header = MimeHeader()
    header["content-type"] = content_type
    subtype = header.get_content_subtype()
    if header.get_content_maintype() != "application" or not (
            subtype == "json" or subtype.endswith("+json")):
        raise BadBody(415, f"the body must be JSON with 'Content-Type: application/json', "
                      f"not {content_type[:80]!r}")
    charset = header.get_param("charset")
    if isinstance(charset, str) and charset.lower().replace("-", "") != "utf8":
        raise BadBody(415, f"JSON bodies are UTF-8, not charset {charset[:40]!r}")


def _check_values(value: dict[str, Any]) -> None:
    """Depth, integer range and lone surrogates, without recursion."""
    stack: list[tuple[Any, str, int]] = [(value, "", 1)]
    while stack:
        v, path, depth = stack.pop()
        if isinstance(v, dict | list):
            if depth > MAX_DEPTH:
                raise BadBody(400, f"the body nests deeper than {MAX_DEPTH} levels")
            items = v.items() if isinstance(v, dict) else enumerate(v)
            for k, child in items:
                if isinstance(k, str):
                    _check_text(k, f"{path}.{_safe(k)}" if path else _safe(k), key=True)
                stack.append((child, f"{path}.{_safe(str(k))}" if path else _safe(str(k)),
                              depth + 1))
        elif isinstance(v, str):
            _check_text(v, path)
        elif isinstance(v, int) and not isinstance(v, bool) and abs(v) > MAX_INT:
            raise BadBody(400, f"{path or 'the body'}: the number does not fit in 64 bits")


def _check_text(s: str, path: str, key: bool = False) -> None:
    m = _SURROGATE.search(s)  # a pair in the JSON text is one character here: lone only
    if m is not None:
        what = "a key" if key else "a string"
        raise BadBody(400, f"{path}: {what} holds a lone UTF-16 surrogate "
                      f"(\\u{ord(m.group()):04x} at character {m.start()}), which is not text")


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:40]} is out of range")
    return value


def _json_type(value: Any) -> str:
    names = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number")


def _safe(key: str) -> str:
    """A key for a message: printable and short (lone surrogates shown escaped)."""
    text = key.encode("utf-8", "backslashreplace").decode("utf-8")
    return text[:40]


def _short(e: Exception) -> str:
    return str(e).split(";")[0][:160]


def _content_type(scope: Scope) -> str | None:
    for name, value in scope.get("headers") or ():
        if name == b"content-type":
            return value.decode("latin-1")  # type: ignore[no-any-return]
    return None


async def _read(receive: Receive) -> bytes:
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect()
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


def _replay(raw: bytes, receive: Receive) -> Receive:
    """The body once, then the client's own messages (a disconnect, for streams)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": raw, "more_body": False}

    return replay
