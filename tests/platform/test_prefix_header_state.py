"""A team chat's ``x-granikv-prefix`` comes from the engine's state of the context at
admission (``PrefixSync.engine_state``), not from the replica's last reconcile: a
context still filling, or gone, is reported as a miss. Pure Python, over the engine's
own registry (tests/platform/test_scoped_sync.py's doubles of the control calls)."""

from __future__ import annotations

import asyncio
from typing import Any

from granikv_platform.registry import PrefixSpec, RegistryState
from granikv_platform.sync import PrefixSync
from tests.platform.test_scoped_sync import EngineRegistry, Hub


class CountingEngine(EngineRegistry):
    def __init__(self) -> None:
        super().__init__()
        self.lists = 0

    async def list_prefixes(self) -> list[dict[str, Any]]:
        self.lists += 1
        return await super().list_prefixes()


def test_the_state_at_admission_is_the_engines() -> None:
    async def main() -> None:
        engine, hub = CountingEngine(), Hub(RegistryState())
        sync = PrefixSync(engine, hub)
        assert await sync.add(PrefixSpec("ctx", "red", (1, 2, 3)))
        lists = engine.lists
        assert await sync.engine_state("red/ctx") == "ready"
        assert engine.lists == lists  # READY in the local view: no call

        # A fill in progress: the local view (from before) knows nothing of it.
        engine.reg.register("blue", (7, 8, 9), "blue/ctx", pin=True)
        assert await sync.engine_state("blue/ctx") == "filling"
        engine.reg.mark_ready("blue/ctx")
        assert await sync.engine_state("blue/ctx") == "ready"  # asked again: not READY before

        # Gone from the engine while the local view was not told.
        engine.reg.unpin("blue/ctx", "blue")
        engine.reg.unregister("blue/ctx", "blue")
        sync.records["blue/ctx"] = {**sync.records["blue/ctx"], "state": "filling"}
        assert await sync.engine_state("blue/ctx") == "absent"

    asyncio.run(main())
