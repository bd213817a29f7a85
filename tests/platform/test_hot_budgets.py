"""Per-team HOT budgets in the platform's registry and its replicas' sync: pure Python.

The registry (``RegistryState``) refuses a pin past the team's budget, once for every
replica; each replica's engine (granikv_engine's ``PrefixRegistry``, with the same
budgets) places what the registry holds without taking another team's slots.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from granikv_engine.hot_budget import TeamBudgets
from granikv_engine.hot_pool import HotPool
from granikv_engine.prefix_registry import PrefixQuotaExceeded, PrefixRegistry
from granikv_platform.registry import PrefixSpec, RegistryState, variant_id
from granikv_platform.sync import PrefixSync
from tests.platform.test_scoped_sync import EngineRegistry

ARENA = 400
BUDGETS = TeamBudgets.share(ARENA, dict.fromkeys(("red", "blue", "gold", "green")))  # 100


def toks(seed: int, n: int) -> tuple[int, ...]:
    return tuple(seed * 1000 + j for j in range(n))


class BudgetedEngine(EngineRegistry):
    def __init__(self) -> None:
        self.reg = PrefixRegistry(HotPool(1, ARENA), budgets=BUDGETS)

    def state(self, pid: str) -> str:
        rec = self.reg.peek(pid)
        return "absent" if rec is None else rec.state.value


class Hub:
    """The hub actor's calls, with their arguments, over a RegistryState."""

    def __init__(self, state: RegistryState) -> None:
        self.state = state

    def __getattr__(self, method: str) -> Any:
        async def call(*args: Any) -> Any:
            return getattr(self.state, method)(*args)
        return call


def test_registry_refuses_a_pin_past_the_budget() -> None:
    st = RegistryState()
    st.put(PrefixSpec("a", "red", toks(1, 60)), 100)
    with pytest.raises(PrefixQuotaExceeded, match="HOT budget of 100 tokens") as e:
        st.put(PrefixSpec("b", "red", toks(2, 41)), 100)
    assert "pins 60 tokens" in str(e.value) and e.value.status == 409
    st.put(PrefixSpec("b", "red", toks(2, 41), pin=False), 100)  # unpinned: not counted
    with pytest.raises(PrefixQuotaExceeded):
        st.put(PrefixSpec("b", "red", toks(2, 41)), 100)  # pinning it later: refused too
    st.put(PrefixSpec("c", "red", toks(3, 40)), 100)  # exactly the budget
    st.put(PrefixSpec("a", "blue", toks(1, 100)), 100)  # another team: its own budget
    assert st.pinned_tokens("red") == 100 and st.pinned_tokens("blue") == 100
    st.put(PrefixSpec("a", "red", toks(1, 60)), 100)  # idempotent at the budget


def test_a_context_counts_without_the_one_it_replaces() -> None:
    st = RegistryState()
    ctx = PrefixSpec("red-context-1", "red", toks(1, 70), kind="context")
    st.set_context(ctx, 100)
    st.put(PrefixSpec(variant_id(ctx.prefix_id, toks(9, 80)), "red", toks(9, 80),
                      kind="variant"))  # no budget given: not checked
    st.put(PrefixSpec("doc", "red", toks(2, 20)), None)
    with pytest.raises(PrefixQuotaExceeded, match="a team context of 90"):
        st.set_context(PrefixSpec("red-context-2", "red", toks(3, 90), kind="context"), 100)
    st.set_context(PrefixSpec("red-context-3", "red", toks(3, 80), kind="context"), 100)
    assert st.pinned_tokens("red") == 100  # the old context and its variant are gone
    with pytest.raises(PrefixQuotaExceeded, match="a context variant"):
        st.put(PrefixSpec("red-context-3:v", "red", toks(4, 1), kind="variant"), 100)


def test_one_team_pins_until_refused_the_others_stay_hot() -> None:
    """The report, through two replicas: red pins until refused; blue's new context is
    HOT on both, and gold's unpinned prefix is still HOT on both."""
    async def main() -> None:
        hub = Hub(RegistryState())
        engines = [BudgetedEngine(), BudgetedEngine()]
        syncs = [PrefixSync(e, hub, BUDGETS) for e in engines]
        await syncs[0].add(PrefixSpec("doc", "gold", toks(1, 90), pin=False))
        placed = 0
        with pytest.raises(PrefixQuotaExceeded):
            for i in range(ARENA // 30):
                await syncs[i % 2].add(PrefixSpec(f"fill-{i}", "red", toks(10 + i, 30)))
                placed += 1
        assert placed == 3
        await syncs[1].set_context(PrefixSpec("blue-context", "blue", toks(2, 100),
                                              kind="context"))
        for s in syncs:
            await s.reconcile()
        for e in engines:
            assert e.state("blue/blue-context") == "ready"
            assert e.state("gold/doc") == "ready"
            assert e.reg.team_slots() == {"red": 90, "blue": 100, "gold": 90}
            assert e.reg.evictions == 0

    asyncio.run(main())


def test_a_pin_left_cold_by_a_late_delete_is_placed_again() -> None:
    """Red deletes a prefix through one replica and pins another in its room; the other
    replica, asked for the new one first, places it COLD (the old one still there); its
    next reconcile drops the old one and places the new one HOT."""
    async def main() -> None:
        hub = Hub(RegistryState())
        engines = [BudgetedEngine(), BudgetedEngine()]
        syncs = [PrefixSync(e, hub, BUDGETS) for e in engines]
        await syncs[0].add(PrefixSpec("old", "red", toks(1, 80)))
        await syncs[1].reconcile()
        await syncs[0].remove("old", "red")
        await syncs[0].add(PrefixSpec("new", "red", toks(2, 80)))
        await syncs[1].ensure("red", "new")
        assert engines[1].state("red/new") == "cold"
        await syncs[1].reconcile()
        assert engines[1].state("red/new") == "ready" and engines[1].state("red/old") == "absent"

    asyncio.run(main())
