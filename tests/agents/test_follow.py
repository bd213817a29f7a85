"""follow(): a run's event log, then live events; a ping never holds the executor up."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from granikv_agents.follow import follow


@dataclass
class Ev:
    seq: int


class Log:
    def __init__(self) -> None:
        self.items: list[Ev] = []

    async def events(self, run_id: str, after: int = 0) -> list[Ev]:
        return [e for e in self.items if e.seq > after]


def test_a_slow_consumer_of_a_ping_does_not_block_the_notifier() -> None:
    async def main() -> list[int | None]:
        log, wake, running = Log(), asyncio.Condition(), {"on": True}
        log.items.append(Ev(1))
        gen = follow(log, "r", 0, lambda: running["on"], wake, idle_s=0.05)
        got: list[int | None] = [(await anext(gen)).seq]  # type: ignore[union-attr]
        assert await anext(gen) is None  # idle: a ping; the consumer now holds it

        async def notify() -> None:  # what the executor does after logging an event
            log.items.append(Ev(2))
            async with wake:
                wake.notify_all()

        await asyncio.wait_for(notify(), 1.0)  # not held up by the consumer's ping
        ev = await anext(gen)
        got.append(ev.seq if ev else None)
        running["on"] = False
        got += [e.seq if e else None async for e in gen]  # nothing left: the end
        return got

    assert asyncio.run(main()) == [1, 2]


def test_it_reads_after_the_given_sequence_and_ends_with_the_run() -> None:
    async def main() -> list[int]:
        log = Log()
        log.items += [Ev(1), Ev(2), Ev(3)]
        return [e.seq async for e in follow(log, "r", 1, lambda: False, asyncio.Condition(),
                                            idle_s=5.0) if e is not None]

    assert asyncio.run(main()) == [2, 3]
