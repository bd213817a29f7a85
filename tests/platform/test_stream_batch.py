"""batch_sse (platform/granikv_platform/stream_batch.py): what a slow consumer gets from
a fast stream, in order, nothing lost; the first event at once; headers kept; a closed
batched stream stops its source."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from granikv_platform.protocol import Item, SseItem, error_item
from granikv_platform.stream_batch import batch_sse


async def source(n: int, gap_s: float, tail: list[Item] | None = None,
                 closed: list[bool] | None = None) -> AsyncIterator[Item]:
    try:
        for i in range(n):
            yield SseItem(f"data: {i}\n\n", {"x-granikv-prefix": "hit"} if i == 0 else None)
            await asyncio.sleep(gap_s)
        for item in tail or []:
            yield item
    finally:
        if closed is not None:
            closed.append(True)


def events(items: list[Item]) -> list[str]:
    return [e for it in items if isinstance(it, SseItem) for e in it.text.split("\n\n") if e]


def test_a_slow_consumer_gets_every_event_in_fewer_items() -> None:
    async def run() -> list[Item]:
        out = []
        async for item in batch_sse(source(50, 0.0)):
            out.append(item)
            await asyncio.sleep(0.002)  # slower than the source
        return out

    out = asyncio.run(run())
    assert events(out) == [f"data: {i}" for i in range(50)]
    assert out[0] == SseItem("data: 0\n\n", {"x-granikv-prefix": "hit"})
    assert len(out) < 50  # merged
    assert all(isinstance(it, SseItem) and it.headers is None for it in out[1:])


def test_an_interval_collects_and_non_sse_items_pass_alone() -> None:
    tail: list[Item] = [error_item(500, "x")]

    async def run() -> list[Item]:
        return [it async for it in batch_sse(source(20, 0.001, tail), interval_s=0.05)]

    out = asyncio.run(run())
    assert events(out) == [f"data: {i}" for i in range(20)]
    assert out[-1] == tail[0] and len(out) <= 4


def test_closing_the_batched_stream_closes_its_source() -> None:
    closed: list[bool] = []

    async def run() -> None:
        stream = batch_sse(source(1000, 0.01, closed=closed))
        async for _ in stream:
            break
        await stream.aclose()  # type: ignore[attr-defined]
        await asyncio.sleep(0.05)

    asyncio.run(run())
    assert closed == [True]
