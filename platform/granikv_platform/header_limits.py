"""A request's header section bounded while it arrives: over ``GRANIKV_MAX_HEADER_BYTES``
(request line and headers) or ``GRANIKV_MAX_HEADERS`` (fields), the HTTP server answers
431, OpenAI-shaped, and closes the connection, without reading the rest.

Why in the HTTP server: Serve's fronts run uvicorn with ``http="auto"``, which is
httptools, and httptools has no header limit; it grows each header it is fed by
concatenation, so one 100 MB header costs the front a gigabyte and seconds of its event
loop (every other client waits), all before the app, and its key check, sees the
request. An ASGI middleware runs only once the header is whole. So the protocol that
feeds the parser counts the header's bytes from the request line's first byte until the
headers are complete, for each request of a keep-alive connection, and never feeds the
parser more than the limit; it counts the fields as the parser reports them.

Where: ``install`` makes uvicorn's ``http`` protocols (``auto``, ``httptools``, ``h11``)
these, in this process, before a server loads its protocol class (``Config.load``, when
the server starts). Serve's proxy callback (``front.proxy_middlewares``) calls it, and
Serve calls that callback in each process where it starts an HTTP server, just before:
its proxy, and under HAProxy each ingress replica's own server. After a refusal the
connection is half-closed and what the client still sends is read and dropped for at
most ``LINGER_S`` (as nginx's lingering close), so that the 431 reaches a client that is
still sending instead of being lost to a reset; memory stays flat meanwhile.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any, ClassVar, Literal

import h11
import httptools
import uvicorn.config
from uvicorn.protocols.http import auto
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from granikv_platform.env import HeaderLimits

Limit = Literal["bytes", "count"]
LINGER_S = 2.0  # how long a refused client's further bytes are read and dropped
STATUS = 431


def install(limits: HeaderLimits | None = None) -> None:
    """Make uvicorn's HTTP protocols in this process the limited ones (``limits``, else
    the environment's). Idempotent; a server already started keeps its protocol."""
    limits = limits or HeaderLimits.from_environ()
    attrs = {"limits": limits}
    tools = type("LimitedHttpToolsProtocol", (HttpToolsLimited,), attrs)
    h11_ = type("LimitedH11Protocol", (H11Limited,), attrs)
    table: dict[str, Any] = uvicorn.config.HTTP_PROTOCOLS  # values: import paths or classes
    table["httptools"], table["h11"] = tools, h11_
    table["auto"] = tools if issubclass(auto.AutoHTTPProtocol, HttpToolsProtocol) else h11_


def refusal(limit: Limit, limits: HeaderLimits) -> bytes:
    """The 431 answer, whole (status line, headers, body)."""
    what = (f"over {limits.max_bytes} bytes (GRANIKV_MAX_HEADER_BYTES)" if limit == "bytes"
            else f"over {limits.max_count} fields (GRANIKV_MAX_HEADERS)")
    rid = uuid.uuid4().hex
    body = json.dumps({"error": {
        "message": f"the request's header section is {what}; the request was not read",
        "type": "RequestHeaderFieldsTooLargeError", "code": STATUS,
        "request_id": rid}}).encode()
    head = (f"HTTP/1.1 {STATUS} Request Header Fields Too Large\r\n"
            f"content-type: application/json\r\ncontent-length: {len(body)}\r\n"
            f"x-request-id: {rid}\r\nconnection: close\r\n\r\n")
    return head.encode("ascii") + body


class _Refusing:
    """The 431 and the lingering close, shared by both parsers' protocols."""

    limits: ClassVar[HeaderLimits]
    transport: asyncio.Transport
    loop: asyncio.AbstractEventLoop
    _refused: bool = False
    _linger: asyncio.TimerHandle | None = None

    def _refuse(self, limit: Limit) -> None:
        self._refused = True
        cycle = getattr(self, "cycle", None)
        if cycle is not None and not cycle.response_complete:
            self.transport.close()  # pipelined behind an answer still being sent
            return
        self.transport.write(refusal(limit, self.limits))
        if not self.transport.can_write_eof():  # TLS
            self.transport.close()
            return
        self.transport.write_eof()
        self._linger = self.loop.call_later(LINGER_S, self.transport.close)

    def _drop_linger(self) -> None:
        if self._linger is not None:
            self._linger.cancel()
            self._linger = None


class _TooManyHeaders(Exception):
    pass


class HttpToolsLimited(_Refusing, HttpToolsProtocol):
    """uvicorn's httptools protocol, fed at most ``limits.max_bytes`` of a header."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._in_header = True  # the bytes fed now belong to a request's header section
        self._header_bytes = 0  # of the current request's header section, counted
        self._fields = 0
        self._began = False  # a request began in the current feed
        self._ended = False  # a request ended in the current feed
        self._body = 0  # body bytes parsed in the current feed

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return  # lingering: read and dropped
        self._unset_keepalive_if_required()
        while data:
            if self._in_header:
                budget = self.limits.max_bytes - self._header_bytes
                if budget <= 0:
                    self._refuse("bytes")
                    return
                piece, data = data[:budget], data[budget:]
            else:
                piece, data = data, b""
            if not self._feed(piece):
                return

    def _feed(self, piece: bytes) -> bool:
        """Feed ``piece`` to the parser and count it; False once the connection is done
        with (refused, a malformed request, an upgrade)."""
        self._began = self._ended = False
        self._body = 0
        try:
            self.parser.feed_data(piece)
        except httptools.HttpParserCallbackError as e:
            if not isinstance(e.__context__, _TooManyHeaders):
                raise
            self._refuse("count")
            return False
        except httptools.HttpParserError:
            self.logger.warning("Invalid HTTP request received.")
            self.send_400_response("Invalid HTTP request received.")
            return False
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
            return False
        if self._in_header:
            if self._began:  # where in ``piece`` it began is unknown: all but the body
                self._header_bytes = len(piece) - self._body
            elif not self._ended:
                self._header_bytes += len(piece)
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        self._drop_linger()
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._began, self._in_header, self._header_bytes, self._fields = True, True, 0, 0

    def on_header(self, name: bytes, value: bytes) -> None:
        self._fields += 1
        if self._fields > self.limits.max_count:
            raise _TooManyHeaders
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._in_header = False
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        self._body += len(body)
        super().on_body(body)

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._ended, self._in_header, self._header_bytes = True, True, 0


class _H11Connection(h11.Connection):
    """h11's server connection, which bounds an incomplete event (a header section) by
    itself, and here also a whole one and its fields; ``over`` says which limit
    refused."""

    def __init__(self, limits: HeaderLimits) -> None:
        super().__init__(h11.SERVER, max_incomplete_event_size=limits.max_bytes)
        self.max_bytes, self.max_count = limits.max_bytes, limits.max_count
        self.over: Limit | None = None

    def next_event(self) -> Any:
        try:
            event = super().next_event()
        except h11.RemoteProtocolError as e:
            if e.error_status_hint == STATUS:  # "Receive buffer too long"
                self.over = "bytes"
            raise
        if isinstance(event, h11.Request):
            # h11 bounds only a header that is still incomplete; one read whole may be over
            if len(event.headers) > self.max_count:
                self.over = "count"
            elif _size(event) > self.max_bytes:
                self.over = "bytes"
            if self.over is not None:
                raise h11.RemoteProtocolError("header too large", error_status_hint=STATUS)
        return event


def _size(request: h11.Request) -> int:
    """The bytes of a parsed request's header section (without optional whitespace)."""
    line = len(request.method) + len(request.target) + len(b"  HTTP/1.1\r\n")
    return line + sum(len(k) + len(v) + 4 for k, v in request.headers) + 2


class H11Limited(_Refusing, H11Protocol):
    """uvicorn's h11 protocol with h11's own size bound set to ``limits.max_bytes``
    (it holds at most one socket read more) and a bound on the fields."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.conn = _H11Connection(self.limits)

    def data_received(self, data: bytes) -> None:
        if not self._refused:
            super().data_received(data)

    def send_400_response(self, msg: str) -> None:
        over = self.conn.over if isinstance(self.conn, _H11Connection) else None
        if over is None:
            super().send_400_response(msg)
        else:
            self._refuse(over)

    def connection_lost(self, exc: Exception | None) -> None:
        self._drop_linger()
        super().connection_lost(exc)
