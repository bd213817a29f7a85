"""A prefix registration that fails in the engine leaves no registry entry
(``PrefixSync.add``), so a client that got an error and gave up does not own a prefix it
cannot see. The registry is the platform's real one (``RegistryState``, behind the hub's
async calls); the engine is an in-memory one at the ``sync.Engine`` seam whose
registration fails as an engine outage does (the call raises)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from granikv_engine.prefix_registry import PrefixNotFound
from granikv_platform.registry import PrefixSpec, RegistryState
from granikv_platform.sync import PrefixSync


class Hub:
    """The hub actor's methods over a RegistryState, awaited as the HubClient's are."""

    def __init__(self) -> None:
        self.state = RegistryState()

    async def get(self, prefix_id: str, team: str) -> PrefixSpec:
        return self.state.get(prefix_id, team)

    async def put(self, spec: PrefixSpec) -> tuple[PrefixSpec, bool]:
        return self.state.put(spec)

    async def delete(self, prefix_id: str, team: str) -> PrefixSpec:
        return self.state.delete(prefix_id, team)

    async def set_context(self, spec: PrefixSpec) -> str | None:
        return self.state.set_context(spec)

    async def snapshot(self, known_version: int) -> tuple[int, list[PrefixSpec] | None]:
        return self.state.snapshot(known_version)


class Engine:
    """Prefix records as the engine lists them; ``down`` makes every call raise."""

    def __init__(self) -> None:
        self.records: dict[str, dict[str, Any]] = {}
        self.down = False
        self.lose_reply = False  # the engine registers, the answer is lost (a timeout)

    def _check(self) -> None:
        if self.down:
            raise RuntimeError("EngineCore died")

    async def list_prefixes(self) -> list[dict[str, Any]]:
        self._check()
        return list(self.records.values())

    async def register(self, spec: PrefixSpec) -> dict[str, Any]:
        self._check()
        self.records[spec.prefix_id] = {"prefix_id": spec.prefix_id, "team": spec.team,
                                        "content_hash": spec.content_hash,
                                        "pinned": spec.pin}
        if self.lose_reply:
            raise TimeoutError("no answer from the engine")
        return self.records[spec.prefix_id]

    async def unregister(self, prefix_id: str, team: str) -> dict[str, Any]:
        self._check()
        return self.records.pop(prefix_id)

    async def set_pin(self, prefix_id: str, team: str, pin: bool) -> dict[str, Any]:
        self._check()
        self.records[prefix_id]["pinned"] = pin
        return self.records[prefix_id]


def spec(pid: str, pin: bool = True) -> PrefixSpec:
    return PrefixSpec(pid, "red", (5, 6, 7), pin=pin)


def test_a_failed_registration_is_rolled_back() -> None:
    async def main() -> None:
        hub, engine = Hub(), Engine()
        sync = PrefixSync(engine, hub)
        engine.down = True
        with pytest.raises(RuntimeError, match="EngineCore died"):
            await sync.add(spec("p1"))
        with pytest.raises(PrefixNotFound):
            await hub.get("p1", "red")  # no entry: the client may simply retry
        engine.down = False
        assert await sync.add(spec("p1")) is True  # the retry creates it
        assert engine.records["red/p1"]["pinned"] is True  # the engine holds the scoped id

    asyncio.run(main())


def test_a_partly_applied_registration_leaves_nothing() -> None:
    async def main() -> None:
        hub, engine = Hub(), Engine()
        sync = PrefixSync(engine, hub)
        engine.lose_reply = True
        with pytest.raises(TimeoutError):
            await sync.add(spec("p2"))
        assert hub.state.list_specs("red") == [] and engine.records == {}

    asyncio.run(main())


def test_an_existing_registration_is_kept_when_a_repeat_fails() -> None:
    async def main() -> None:
        hub, engine = Hub(), Engine()
        sync = PrefixSync(engine, hub)
        assert await sync.add(spec("p3")) is True
        engine.records.clear()  # the engine lost it (a restart), the registry has it
        engine.down = True
        with pytest.raises(RuntimeError):
            await sync.add(spec("p3"))  # the same registration again, not created
        assert (await hub.get("p3", "red")).token_ids == (5, 6, 7)  # still registered

    asyncio.run(main())
