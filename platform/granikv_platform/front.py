"""What Serve's HTTP front answers by itself, in the platform's shape: an ASGI middleware
for Serve's HTTP proxy (and for a replica's own HTTP server under direct ingress).

The LLM replicas are the app's ingress, so every answer of the app comes from a
replica's FastAPI app, OpenAI-shaped. Serve's front answers a few requests itself, in
plain text: a full queue or no replica in time (503 or 429, ``routing.py``), a request
timeout (408), a path outside every application (404); and nothing at all for a replica
that died before it answered (the server then says 500). And when the replica serving a
stream dies, Serve stops sending: the client's stream ends with neither a finish nor an
error. This middleware makes those answers what the app's own would be: ``{"error":
{"message", "type", "code", "request_id"}}`` with the request's id, a 503 that says when
to retry (a lost replica is one: the request was not served, another replica can serve
it), and a stream cut by a lost replica ends with an OpenAI-shaped error event and
``data: [DONE]``.

The front also gives each request one id before Serve's own request-id middleware reads
it: the client's ``x-request-id`` when it sent one that is a plain token (at most 128
characters, since the id is echoed and logged), else a new one in its place. So the
response header, every error body and the log name the same id.

Serve applies it through its proxy callback (``RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH``
set to ``CALLBACK``, in the environment of the cluster's processes: ``granikv run`` and
the shipped images set it). Serve calls the callback in each process where it starts an
HTTP server, before it starts, so the callback also bounds the header sections that
server reads (``header_limits.py``). It reads no body of the app's and adds one check per
message: the app's answers pass as they are. Starlette only: the proxy imports no vLLM.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field

from starlette.datastructures import MutableHeaders
from starlette.middleware import Middleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from granikv_platform import header_limits

# Serve's proxy callback: Ray reads this variable when its processes start.
PROXY_CALLBACK_ENV = "RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH"
CALLBACK = "granikv_platform.front:proxy_middlewares"
RETRY_AFTER_S = 1
_TYPES = {404: "NotFoundError", 408: "RequestTimeoutError", 429: "RateLimitError",
          503: "ServiceUnavailableError"}
LOST = "the LLM replica serving this request was lost; retry the request"
REQUEST_ID_HEADER = "x-request-id"
_PLAIN_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")


def proxy_middlewares() -> list[Middleware]:
    """Serve's proxy callback: the middlewares it puts around its HTTP front, and the
    header limits of the server it is about to start in this process."""
    header_limits.install()
    return [Middleware(ServeAnswers)]


def one_request_id(scope: Scope) -> tuple[str, bool]:
    """The request's id, made its only ``x-request-id`` in ``scope``, and whether it is
    the client's: one plain-token id is kept, anything else (none, several, a long or
    odd one) is replaced by a new id."""
    headers = MutableHeaders(scope=scope)
    given = headers.getlist(REQUEST_ID_HEADER)
    if len(given) == 1 and _PLAIN_ID.fullmatch(given[0]):
        return given[0], True
    rid = uuid.uuid4().hex
    headers[REQUEST_ID_HEADER] = rid
    return rid, False


@dataclass
class _Answer:
    """What the front has sent of one answer."""

    status: int = 0
    started: bool = False
    ended: bool = False
    sse: bool = False
    rid: str | None = None  # the request's id, as Serve put it on the answer
    held: Message | None = None  # Serve's own error: its start, until its body is read
    body: list[bytes] = field(default_factory=list)


class ServeAnswers:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        one_request_id(scope)
        answer = _Answer()

        async def relay(message: Message) -> None:
            kind = message["type"]
            if kind == "http.response.start":
                headers = _headers(message)
                ctype, answer.rid = headers.get("content-type", ""), headers.get("x-request-id")
                if message["status"] >= 400 and ctype.startswith("text/plain"):
                    answer.held = message  # Serve's text: rewritten once read whole
                    return
                answer.started, answer.status = True, message["status"]
                answer.sse = ctype.startswith("text/event-stream")
            elif kind == "http.response.body":
                if answer.held is not None:
                    answer.body.append(message.get("body", b""))
                    if not message.get("more_body", False):
                        await self._rewrite(answer, send)
                    return
                answer.ended = not message.get("more_body", False)
            await send(message)

        await self.app(scope, receive, relay)
        if not answer.started and answer.held is None:
            # Serve sent nothing: the replica died before it answered (Serve logged why).
            answer.rid = _headers(scope).get("x-request-id")
            answer.held = {"type": "http.response.start", "status": 500, "headers": []}
            await self._rewrite(answer, send)
        elif answer.started and not answer.ended and answer.sse:
            # Serve stopped relaying a stream: its replica was lost (it logged why).
            event = {"error": {"message": LOST, "type": _TYPES[503], "code": 503}}
            if answer.rid:
                event["error"]["request_id"] = answer.rid
            await send({"type": "http.response.body", "more_body": False,
                        "body": f"data: {json.dumps(event)}\n\ndata: [DONE]\n\n".encode()})

    async def _rewrite(self, answer: _Answer, send: Send) -> None:
        """Serve's plain-text error as the platform's JSON error."""
        start = answer.held
        assert start is not None
        answer.held, answer.started, answer.ended = None, True, True
        status = int(start["status"])
        text = b"".join(answer.body).decode("utf-8", "replace").strip()
        headers = _headers(start)
        if status == 500:  # Ray's error (a replica that died): Serve logged it
            status, text = 503, LOST
        answer.status = status
        error: dict[str, object] = {"message": text or "the request was not served",
                                    "type": _TYPES.get(status, "Error"), "code": status}
        if answer.rid:
            error["request_id"] = answer.rid
        body = json.dumps({"error": error}).encode()
        raw = [(k, v) for k, v in start.get("headers", [])
               if k.lower() not in (b"content-type", b"content-length", b"retry-after")]
        raw += [(b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode())]
        if answer.rid and "x-request-id" not in headers:
            raw.append((b"x-request-id", answer.rid.encode()))
        retry = headers.get("retry-after") or (str(RETRY_AFTER_S) if status == 503 else None)
        if retry:
            raw.append((b"retry-after", retry.encode()))
        await send({**start, "status": status, "headers": raw})
        await send({"type": "http.response.body", "body": body, "more_body": False})


def _headers(start: Message | Scope) -> dict[str, str]:
    """The headers of a response start (or a request's scope), by lower-case name (the
    first of each)."""
    out: dict[str, str] = {}
    for k, v in start.get("headers", []):
        out.setdefault(bytes(k).decode("latin-1").lower(), bytes(v).decode("latin-1"))
    return out
