"""A replica's watch over its engine: a dead engine (its core process exited or its
output loop failed) answers 503, never 500, and ends the replica's process within
``DEAD_ENGINE_EXIT_S`` so that Serve starts a new replica at once (a failing health
check would take three periods)."""

from __future__ import annotations

import asyncio
import functools
import logging
import os
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

from granikv_platform.engine import EngineHost
from granikv_platform.protocol import Item, error_item

logger = logging.getLogger("ray.serve")

_A = TypeVar("_A")
# A replica whose engine died answers 503 for this long before its process exits (so
# that streams in flight get their error event), and Serve starts a new replica at once.
DEAD_ENGINE_EXIT_S = 1.0
ENGINE_WATCH_S = 0.5  # how often the replica looks at its engine
DEAD_ENGINE = ("this LLM replica's engine stopped; Serve is replacing the replica: "
               "retry shortly")


def dead_answer(engine: EngineHost | None) -> Item | None:
    """A 503 when ``engine`` is dead (or already shut down), None when it runs."""
    if engine is not None and not engine.llm.errored:
        return None
    return error_item(503, DEAD_ENGINE)


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
    (forget the replica, shut the engine's front end down) and end the process."""
    while not engine.llm.errored:
        await asyncio.sleep(ENGINE_WATCH_S)
    logger.error("GraniKV replica %s: its engine stopped (%s); exiting in %.1f s so that "
                 "Serve replaces it", name, type(engine.llm.dead_error).__name__,
                 DEAD_ENGINE_EXIT_S)
    await asyncio.sleep(DEAD_ENGINE_EXIT_S)
    try:
        await leave()
    finally:
        logging.shutdown()
        os._exit(1)
