"""PrefixSync with team-scoped ids, over the engine's own registry: pure Python.

The engine side is granikv_engine's ``PrefixRegistry`` on a ``HotPool``, answered with
the engine's control records (``control.record_dict``), as the vLLM plugin serves its
control calls (a registration's fill completes at once: no vLLM here). The registry
side is the platform's ``RegistryState`` behind the hub's async calls, counted as the
replica counts its control-plane calls.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from granikv_engine.hot_pool import HotPool
from granikv_engine.prefix_registry import PrefixNotFound, PrefixRegistry
from granikv_engine.vllm_plugin.core.control import record_dict
from granikv_platform.registry import PrefixSpec, RegistryState
from granikv_platform.sync import PrefixSync


class EngineRegistry:
    """The ``sync.Engine`` calls, on the engine's PrefixRegistry."""

    def __init__(self) -> None:
        self.reg = PrefixRegistry(HotPool(1, 256))

    async def list_prefixes(self) -> list[dict[str, Any]]:
        return [dict(record_dict(r)) for r in self.reg.records()]

    async def register(self, spec: PrefixSpec) -> dict[str, Any]:
        rec = self.reg.register(spec.team, spec.token_ids, spec.prefix_id, pin=spec.pin)
        self.reg.mark_ready(rec.prefix_id)
        return dict(record_dict(rec))

    async def unregister(self, prefix_id: str, team: str) -> dict[str, Any]:
        return {"prefix_id": prefix_id, "freed_now": self.reg.unregister(prefix_id, team)}

    async def set_pin(self, prefix_id: str, team: str, pin: bool) -> dict[str, Any]:
        rec = (self.reg.pin if pin else self.reg.unpin)(prefix_id, team)
        return dict(record_dict(rec))


class Hub:
    """The hub actor's calls over a RegistryState; ``calls`` counts them."""

    def __init__(self, state: RegistryState) -> None:
        self.state = state
        self.calls = 0

    async def _call(self, method: str, *args: Any) -> Any:
        self.calls += 1
        return getattr(self.state, method)(*args)

    async def get(self, prefix_id: str, team: str) -> PrefixSpec:
        return await self._call("get", prefix_id, team)  # type: ignore[no-any-return]

    async def context(self, team: str) -> PrefixSpec | None:
        return await self._call("context", team)  # type: ignore[no-any-return]

    async def put(self, spec: PrefixSpec) -> tuple[PrefixSpec, bool]:
        return await self._call("put", spec)  # type: ignore[no-any-return]

    async def delete(self, prefix_id: str, team: str) -> PrefixSpec:
        return await self._call("delete", prefix_id, team)  # type: ignore[no-any-return]

    async def set_context(self, spec: PrefixSpec) -> str | None:
        return await self._call("set_context", spec)  # type: ignore[no-any-return]

    async def snapshot(self, known_version: int) -> tuple[int, list[PrefixSpec] | None]:
        return await self._call("snapshot", known_version)  # type: ignore[no-any-return]


def test_two_teams_one_id_two_prefixes_in_the_engine() -> None:
    async def main() -> None:
        engine, hub = EngineRegistry(), Hub(RegistryState())
        sync = PrefixSync(engine, hub)
        assert await sync.add(PrefixSpec("doc", "red", (1, 2, 3)))
        assert await sync.add(PrefixSpec("doc", "blue", (7, 8)))  # not a conflict: blue's
        held = {r["prefix_id"]: (r["team"], r["state"]) for r in await engine.list_prefixes()}
        assert held == {"red/doc": ("red", "ready"), "blue/doc": ("blue", "ready")}
        assert (await sync.ensure("red", "doc")).token_ids == (1, 2, 3)
        assert (await sync.ensure("blue", "blue/doc")).token_ids == (7, 8)
        with pytest.raises(PrefixNotFound, match="no prefix 'red/doc'"):
            await sync.ensure("blue", "red/doc")  # in blue's scope: blue/red/doc
        assert await sync.add(PrefixSpec("red-only", "red", (4,)))
        for fresh in (False, True):
            with pytest.raises(PrefixNotFound, match="no prefix 'red-only'"):
                await sync.ensure("blue", "red-only", fresh=fresh)
            with pytest.raises(PrefixNotFound, match="no prefix 'red-only'"):
                await sync.remove("red-only", "blue")
        await sync.remove("doc", "blue")
        assert {r["prefix_id"] for r in await engine.list_prefixes()} == {
            "red/doc", "red/red-only"}

    asyncio.run(main())


def test_a_team_chat_naming_its_context_needs_no_registry_call() -> None:
    """The agents name the context they pinned by the id the API showed them (the
    team's own); a replica whose view holds that context answers without a call."""
    async def main() -> None:
        engine, hub = EngineRegistry(), Hub(RegistryState())
        sync = PrefixSync(engine, hub)
        await sync.set_context(PrefixSpec("red-context-1", "red", (5, 6), kind="context",
                                          text="ctx"))
        shown = sync.context("red")
        assert shown is not None and shown.team_id == "red-context-1"
        calls = hub.calls
        for _ in range(3):
            got = await sync.fetch_context("red", expect=shown.team_id)
            assert got is not None and got.prefix_id == "red/red-context-1"
        assert hub.calls == calls
        assert await sync.fetch_context("blue", expect="red-context-1") is None

    asyncio.run(main())


def test_an_engine_holding_ids_from_before_scoping_converges() -> None:
    async def main() -> None:
        engine, state = EngineRegistry(), RegistryState()
        engine.reg.register("red", (1, 2, 3), "doc")  # an engine's id before scoping
        state.put(PrefixSpec("doc", "red", (1, 2, 3)))
        sync = PrefixSync(engine, Hub(state))
        todo = await sync.reconcile(force=True)
        assert [s.prefix_id for s in todo.register] == ["red/doc"]
        assert todo.unregister == (("doc", "red"),)
        assert [r["prefix_id"] for r in await engine.list_prefixes()] == ["red/doc"]

    asyncio.run(main())
