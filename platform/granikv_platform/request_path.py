"""Control-plane calls made while serving a request, counted per replica.

A bound request should cost no call to the registry actor and no engine-core utility
call once its prefix is known (``sync.py``'s local view). The replica marks the
control-plane work it does for a request with ``on_request_path``; the hub client and
the engine host count each call they make inside such a mark. The background loop and
the stats calls run outside it, so the counters measure the request path alone.
"""

from __future__ import annotations

from collections.abc import Awaitable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")

_ON_REQUEST_PATH: ContextVar[bool] = ContextVar("granikv_on_request_path", default=False)


@dataclass
class ControlPlaneCalls:
    """Calls made on the request path: to the registry actor, and engine-core utility
    calls (prefix list / get / register / pin)."""

    hub: int = 0
    engine: int = 0

    def count_hub(self) -> None:
        if _ON_REQUEST_PATH.get():
            self.hub += 1

    def count_engine(self) -> None:
        if _ON_REQUEST_PATH.get():
            self.engine += 1


async def on_request_path(work: Awaitable[T]) -> T:
    """Await ``work`` with its control-plane calls counted as the request path's. Set
    and reset within one await, so it is safe inside an async generator."""
    token = _ON_REQUEST_PATH.set(True)
    try:
        return await work
    finally:
        _ON_REQUEST_PATH.reset(token)
