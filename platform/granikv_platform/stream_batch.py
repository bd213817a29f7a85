"""Stream batching: SSE chunks that are ready together cross a Ray handle as one item
(a service's call of an LLM replica, such as an agent's turn; HTTP streams are served
in the replica and need none).

vLLM's OpenAI server yields one SSE event per engine step and request. At a few hundred
concurrent streams, one Ray handle item per event costs the replica and its caller more
than the event itself. ``batch_sse`` reads the engine's stream in a task of its own and
yields everything that arrived since the last item as one ``SseItem`` (SSE events
concatenate). The first event goes out at once (time to first token); after
that, ``interval_s`` > 0 waits that long to collect more, as Ray Serve LLM's stream
batching interval does; 0 only merges what is already waiting, so a consumer that keeps
up sees every event as it comes. Non-SSE items (a JSON answer, an error) pass alone.
Closing the batched stream cancels the reader, which aborts the engine request.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from granikv_platform.protocol import Item, SseItem

_END = object()


async def batch_sse(items: AsyncIterator[Item], interval_s: float = 0.0) -> AsyncIterator[Item]:
    queue: asyncio.Queue[Any] = asyncio.Queue()

    async def read() -> None:
        try:
            async for item in items:
                queue.put_nowait(item)
        except BaseException as e:  # handed to the consumer, raised there
            queue.put_nowait(e)
            return
        queue.put_nowait(_END)

    reader = asyncio.create_task(read())
    first_sent = False
    try:
        pending: Any = None
        while True:
            head = pending if pending is not None else await queue.get()
            pending = None
            if head is _END:
                return
            if isinstance(head, BaseException):
                raise head
            if not isinstance(head, SseItem):
                yield head
                continue
            if first_sent and interval_s > 0:
                await asyncio.sleep(interval_s)
            parts = [head.text]
            while not queue.empty():
                nxt = queue.get_nowait()
                if not isinstance(nxt, SseItem):  # the end, an error, another kind
                    pending = nxt
                    break
                parts.append(nxt.text)
            first_sent = True
            # the stream's response headers ride on its first item
            yield head if len(parts) == 1 else SseItem("".join(parts), head.headers)
    finally:
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await reader
