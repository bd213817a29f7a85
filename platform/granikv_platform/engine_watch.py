"""A replica's watch over its engine: a dead engine (its core process exited or its
output loop failed) answers 503, never 500, unstreamed (with ``Retry-After``) and in a
stream that it cut (the same error as an event), and ends the replica's process about
``DEAD_ENGINE_EXIT_S`` after it died, so that Serve starts a new replica at once (a
failing health check would take three periods)."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

from granikv_platform.engine import EngineHost
from granikv_platform.protocol import Item, SseItem, error_item
from granikv_platform.stream_end import error_event, replace_errors

logger = logging.getLogger("ray.serve")

_A = TypeVar("_A")
# A replica whose engine died answers 503 for this long before it leaves and its
# process exits (streams in flight get their error event through Serve's proxy: they
# end within 0.1 s of the death), and Serve starts a new replica at once. Leaving takes
# about 0.3 s more: the dead engine's workers, which outlive their engine core by
# seconds, are killed (``EngineFiles.remove_left``).
DEAD_ENGINE_EXIT_S = 0.75
ENGINE_WATCH_S = 0.1  # how often the replica looks at its engine (a property read)
DEAD_ENGINE = ("this LLM replica's engine stopped; Serve is replacing the replica: "
               "retry shortly")
# What a stream the dead engine cut ends with (vLLM's own event says 500).
DEAD_EVENT = error_event(DEAD_ENGINE, 503, "ServiceUnavailableError")


def dead_answer(engine: EngineHost | None) -> Item | None:
    """A 503 when ``engine`` is dead (or already shut down), None when it runs."""
    if engine is not None and not engine.llm.errored:
        return None
    return error_item(503, DEAD_ENGINE)


def dead_stream(item: SseItem, dead: Item | None) -> SseItem:
    """``item``, a stream's chunk with an error event: the dead engine's 503 event in
    its place when the engine died (``dead``: ``dead_answer``'s), else as it is."""
    if dead is None:
        return item
    return dataclasses.replace(item, text=replace_errors(item.text, DEAD_EVENT))


class Watched(Protocol):
    def _dead(self) -> Item | None: ...


def needs_engine(method: Callable[..., Awaitable[_A]]) -> Callable[..., Awaitable[_A]]:
    """A unary method that uses the engine: a 503 (not a 500) when the engine is dead,
    before or during the call."""

    @functools.wraps(method)
    async def call(self: Watched, *args: Any, **kwargs: Any) -> Any:
        dead = self._dead()
        if dead is not None:
            return dead
        try:
            return await method(self, *args, **kwargs)
        except Exception:
            dead = self._dead()
            if dead is None:
                raise
            return dead

    return call


async def exit_when_dead(engine: EngineHost, name: str,
                         leave: Callable[[], Awaitable[None]]) -> None:
    """Wait until ``engine`` dies; then, after ``DEAD_ENGINE_EXIT_S`` of 503s, ``leave``
    (forget the replica, shut the engine's front end down, end what is left of the
    engine and remove its files) and end the process. Not both at once: the routes
    use the engine, which ``leave`` takes away."""
    while not engine.llm.errored:
        await asyncio.sleep(ENGINE_WATCH_S)
    died = time.monotonic()
    logger.error("GraniKV replica %s: its engine stopped (%s); exiting in %.2f s so that "
                 "Serve replaces it", name, type(engine.llm.dead_error).__name__,
                 DEAD_ENGINE_EXIT_S)
    await asyncio.sleep(DEAD_ENGINE_EXIT_S)
    try:
        left = await _timed(leave)
        logger.error("GraniKV replica %s: exiting %.2f s after its engine stopped (leaving "
                     "took %.2f s)", name, time.monotonic() - died, left)
    finally:
        logging.shutdown()
        os._exit(1)


async def _timed(call: Callable[[], Awaitable[None]]) -> float:
    """Seconds ``call`` took; what it raised is logged (the process exits anyway)."""
    t0 = time.monotonic()
    try:
        await call()
    except Exception:
        logger.exception("GraniKV: leaving after the engine stopped failed")
    return time.monotonic() - t0
