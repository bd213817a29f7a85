"""The run service's streams as HTTP: the first item decides the answer (an error item
is the response; anything else starts a server-sent event stream that relays every
item's ``sse`` text), and a client that goes away stops the service's generator."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from starlette.responses import Response, StreamingResponse

from granikv_platform.errors import error_response
from granikv_platform.protocol import Item


async def relay(gen: Any, headers: dict[str, str] | None = None) -> Response:
    """``gen``: a Serve handle's streaming call of the run service."""
    first: Item = await gen.__anext__()
    if "error" in first:
        gen.cancel()
        return error_response(first)
    return StreamingResponse(_sse(first, gen), media_type="text/event-stream",
                             headers=headers)


async def _sse(first: Item, gen: Any) -> AsyncIterator[str]:
    try:
        yield first["sse"]
        async for item in gen:
            yield item["sse"]
    finally:
        gen.cancel()  # a client that went away stops the service's generator
