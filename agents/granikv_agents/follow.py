"""Following a run's event log: what was logged after a sequence number, then what comes
while the run goes on (both executors' ``events``).

The executor notifies ``wake`` after each event it logs. A ping (``None``: nothing new
for ``idle_s``) is yielded after the condition's lock is released: a consumer slow to
take it (a client reading its stream slowly) would otherwise hold up the executor's
notifications, and with them every run's event logging.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Protocol, TypeVar


class Sequenced(Protocol):
    @property
    def seq(self) -> int: ...


E = TypeVar("E", bound=Sequenced)


class EventLog(Protocol[E]):
    async def events(self, run_id: str, after: int = 0) -> list[E]: ...


async def follow(log: EventLog[E], run_id: str, after: int, running: Callable[[], bool],
                 wake: asyncio.Condition, idle_s: float) -> AsyncIterator[E | None]:
    """The events of ``run_id`` after ``after``, then new ones until the run stops
    (``running()`` false and nothing left); None whenever ``idle_s`` passed without one."""
    while True:
        alive = running()  # before the read: an event logged as the run ends is read
        batch = await log.events(run_id, after)
        for ev in batch:
            yield ev
            after = ev.seq
        if batch:
            continue
        if not alive:
            return
        async with wake:
            try:
                await asyncio.wait_for(wake.wait(), idle_s)
                idle = False
            except TimeoutError:
                idle = True
        if idle:
            yield None
