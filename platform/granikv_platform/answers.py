"""Protocol items as HTTP answers: one place for the OpenAI routes and every
route that relays a deployment's answer (prefixes, team context, the agents' runs and
threads).

- ``answer(item)``: a unary answer (JSON with its status and headers, or the error);
- ``stream_answer(gen)``: a streaming call's answer. Its first item decides: an error is
  the response; a JSON item is the whole answer; SSE starts an event stream that relays
  every later item. After the first chunk the status is sent, so a later error (or a
  replica lost mid-stream) is reported inline, as an OpenAI-shaped error event. A client
  that goes away cancels the call (the engine request is aborted).

What crosses to the client is made public here: errors get the request's id and a
5xx's text stays in the log (``errors.client_error``), vLLM's own error events in a
stream likewise, and an ``error`` text inside an answer (a failed run's) loses Ray's
internals (``protocol.public_text``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, AsyncIterator, Mapping

from starlette.responses import JSONResponse, Response, StreamingResponse

from granikv_platform.errors import REPLICA_LOST, client_error, error_response, unavailable
from granikv_platform.protocol import (
    ErrorItem,
    Item,
    JsonItem,
    SseItem,
    error_item,
    has_ray_detail,
    public_errors,
)


def answer(item: Item) -> Response:
    if isinstance(item, ErrorItem):
        return error_response(item)
    if isinstance(item, JsonItem):
        body = public_errors(item.body) if _may_hold_details(item.body) else item.body
        return JSONResponse(body, status_code=item.status, headers=item.headers)
    return error_response(error_item(500, "expected one answer, got a stream chunk"))


def _may_hold_details(body: object) -> bool:
    return isinstance(body, dict | list) and has_ray_detail(json.dumps(body))


def public_sse(text: str) -> str:
    """SSE events for the client: an error event (vLLM's own, when a request fails
    mid-stream) as ``client_error`` makes it; other events' ``error`` texts (an agent
    run's status event) without Ray's internals. Events without ``"error"`` pass as
    they are (one substring test per chunk)."""
    if '"error"' not in text:
        return text
    return "\n".join(_public_line(line) for line in text.split("\n"))


def _public_line(line: str) -> str:
    if not line.startswith("data: ") or '"error"' not in line:
        return line
    try:
        value = json.loads(line[6:])
    except ValueError:
        return line
    err = value.get("error") if isinstance(value, dict) else None
    if isinstance(err, dict) and isinstance(err.get("message"), str):
        value = client_error(error_item(int(err.get("code") or 500), err["message"],
                                        err.get("type")))[1]
    else:
        value = public_errors(value)
    return f"data: {json.dumps(value)}"


async def stream_answer(items: AsyncIterator[Item], timeout_s: float | None = None,
                        headers: Mapping[str, str] | None = None) -> Response:
    """``items``: an answer's items, from the replica's own generator (a chat or
    completion served in this process) or from a Serve handle's streaming call (a
    service's, such as a run's events). ``timeout_s`` bounds the wait for the first
    item; ``headers`` are added to the answer's own."""
    try:
        async with asyncio.timeout(timeout_s):
            first: Item = await anext(items)
    except StopAsyncIteration:
        return error_response(error_item(500, "the deployment returned nothing"))
    except BaseException:
        await _close(items)
        raise
    if not isinstance(first, SseItem):
        await _close(items)
        return answer(first)
    return StreamingResponse(_relay(first, items), media_type="text/event-stream",
                             headers={**(first.headers or {}), **(headers or {})})


async def _relay(first: SseItem, items: AsyncIterator[Item]) -> AsyncIterator[str]:
    try:
        yield public_sse(first.text)
        async for item in items:
            if isinstance(item, SseItem):
                yield public_sse(item.text)
                continue
            err = item if isinstance(item, ErrorItem) else error_item(
                500, "expected a stream chunk, got one answer")
            yield _event(err)
            return
    except REPLICA_LOST as e:  # the deployment behind a handle died mid-stream
        lost = unavailable(e)
        yield _event(error_item(lost.status, lost.message))
    finally:
        await _close(items)  # a client that went away aborts the request


async def _close(items: AsyncIterator[Item]) -> None:
    """Stop ``items``: a handle's call is cancelled, a local generator closed."""
    cancel = getattr(items, "cancel", None)
    if cancel is not None:
        cancel()
    elif isinstance(items, AsyncGenerator):
        await items.aclose()


def _event(err: ErrorItem) -> str:
    return f"data: {json.dumps(client_error(err)[1])}\n\n"
