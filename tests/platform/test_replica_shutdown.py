"""A replica whose start-up failed part-way is shut down by Serve (``__del__``) like any
other: only what was made is undone, and an engine that was started is shut down (its
engine core and GPU memory are not left behind), once."""

from __future__ import annotations

import asyncio

import pytest

from granikv_platform.replica import LLMReplica

# the garbage collector calls the async __del__ again on the test's object, unawaited
pytestmark = pytest.mark.filterwarnings("ignore:coroutine 'LLMReplica.__del__'")


class _Engine:
    def __init__(self) -> None:
        self.shutdowns = 0

    def shutdown(self) -> None:
        self.shutdowns += 1


def test_del_after_a_start_that_failed_before_the_engine() -> None:
    replica = LLMReplica.__new__(LLMReplica)
    asyncio.run(replica.__del__())  # nothing was made: nothing to undo, no AttributeError


def test_del_after_a_start_that_failed_after_the_engine() -> None:
    replica = LLMReplica.__new__(LLMReplica)
    engine = _Engine()
    replica.engine = engine  # type: ignore[assignment]
    replica._shutdown_engine()  # what __init__ does when a later step raises
    asyncio.run(replica.__del__())
    assert engine.shutdowns == 1
