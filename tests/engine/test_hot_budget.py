"""Per-team HOT budgets in the engine's PrefixRegistry: each team within its budget, and
no team's placement taking another team's slots (exact slots, on CPU)."""

from __future__ import annotations

import pytest

from granikv_engine.hot_budget import TeamBudgets
from granikv_engine.hot_pool import HotPool, SlotRange
from granikv_engine.prefix_registry import PrefixRegistry, PrefixState

TEAMS = {"red": None, "blue": None, "gold": None, "green": None}


def make(cap: int = 100, **own: int) -> PrefixRegistry:
    budgets = TeamBudgets.share(cap, {**TEAMS, **own})
    return PrefixRegistry(HotPool(1, cap), budgets=budgets)


def ready(reg: PrefixRegistry, team: str, n: int, pid: str, seed: int,
          pin: bool = True) -> PrefixState:
    rec = reg.register(team, [seed * 1000 + j for j in range(n)], pid, pin=pin)
    reg.mark_ready(rec)
    return rec.state


def test_share_equal_floored_and_capped() -> None:
    assert TeamBudgets.share(8192, dict.fromkeys("abcdefgh")).default == 1024
    assert TeamBudgets.share(8192, dict.fromkeys("abcdefgh"), floor=1536).of("zz") == 1536
    assert TeamBudgets.share(8192, {}).default == 8192  # no configured team: the arena
    b = TeamBudgets.share(100, {"red": 70, "blue": None, "gold": 500}, default=20)
    assert (b.of("red"), b.of("blue"), b.of("gold"), b.of("other")) == (70, 20, 100, 20)
    assert TeamBudgets.share(10, dict.fromkeys("ab"), floor=50).default == 10


def test_one_team_fills_its_budget_the_others_still_fit() -> None:
    """The report: red pins until its budget is full; its next pin is COLD (red's
    alone), blue's new context is HOT, and gold's unpinned prefix stays."""
    reg = make()  # 4 teams x 25 slots
    assert ready(reg, "gold", 10, "gold/doc", 1, pin=False) is PrefixState.READY
    states = [ready(reg, "red", 8, f"red/p{i}", 10 + i) for i in range(4)]
    assert states == [PrefixState.READY] * 3 + [PrefixState.COLD]
    assert reg.team_slots() == {"red": 24, "gold": 10} and reg.over_budget == 1
    assert ready(reg, "blue", 25, "blue/context", 2) is PrefixState.READY
    assert reg.get("gold/doc", "gold").state is PrefixState.READY
    assert reg.evictions == 0


def test_a_registration_evicts_only_its_own_team() -> None:
    """The arena is full; red's new prefix takes red's own unpinned entry, never gold's
    (older) one, even where gold's would make a contiguous fit and red's would not
    without compaction."""
    reg = make(cap=40, red=20, gold=20)
    ready(reg, "gold", 10, "gold/old", 1, pin=False)  # least recently used
    ready(reg, "red", 10, "red/a", 2, pin=False)
    ready(reg, "gold", 10, "gold/b", 3)
    ready(reg, "red", 10, "red/c", 4)
    assert reg.pool.stats().free == 0
    assert ready(reg, "red", 10, "red/d", 5) is PrefixState.READY
    assert reg.get("gold/old", "gold").state is PrefixState.READY
    assert reg.get("red/a", "red").state is PrefixState.COLD
    assert reg.get("red/d", "red").hot == SlotRange(11, 10)


def test_within_budget_whatever_the_others_hold() -> None:
    """Every other team at its budget (pinned, read, unpinned): a team's context of its
    whole budget still finds room, compacting around the others' entries."""
    reg = make()
    for i, team in enumerate(("red", "gold", "green")):
        ready(reg, team, 13, f"{team}/pinned", 10 + i)
        ready(reg, team, 12, f"{team}/cache", 20 + i, pin=False)
    reg.acquire("gold/cache")  # read: stays where it is
    assert ready(reg, "red", 25, "red/more", 30) is PrefixState.COLD  # blue's room
    assert ready(reg, "blue", 25, "blue/context", 2) is PrefixState.READY
    assert {t: n for t, n in reg.team_slots().items()} == dict.fromkeys(TEAMS, 25)
    assert reg.evictions == 0


def test_a_team_past_its_budget_is_cold_and_evicts_its_own_lru() -> None:
    reg = make()
    assert ready(reg, "red", 26, "red/big", 1) is PrefixState.COLD  # larger than 25
    ready(reg, "red", 10, "red/a", 2, pin=False)
    ready(reg, "red", 10, "red/b", 3, pin=False)
    assert ready(reg, "red", 10, "red/c", 4) is PrefixState.READY  # red/a made room
    assert reg.get("red/a", "red").state is PrefixState.COLD
    assert reg.get("red/b", "red").state is PrefixState.READY
    assert reg.team_slots() == {"red": 20}


def test_implicit_prefixes_count_against_their_team() -> None:
    """An implicit promotion stays within its team's budget and evicts no other team's
    implicit prefix; a registration of the team may evict its own."""
    reg = make()
    gold = reg.promote("gold", list(range(20)), budget=40)
    assert gold is not None and reg.implicit_slots() == 20
    assert reg.promote("red", list(range(100, 125)), budget=40) is None  # 20 + 25 > 40
    assert reg.get(gold.prefix_id, None).state is PrefixState.READY
    assert reg.promote("blue", list(range(300, 326)), budget=80) is None  # 26 > 25
    assert ready(reg, "gold", 15, "gold/ctx", 3) is PrefixState.READY
    assert gold.prefix_id not in {r.prefix_id for r in reg.records()}  # its own: evicted


@pytest.mark.parametrize("budgets", [None, TeamBudgets(1000)])
def test_whole_arena_budgets_keep_the_old_placement(budgets: TeamBudgets | None) -> None:
    """A budget as large as the arena still never evicts another team's entry; without
    budgets, the least recently used entry of any team goes (the engine alone)."""
    reg = PrefixRegistry(HotPool(1, 20), budgets=budgets)
    ready(reg, "gold", 10, "gold/x", 1, pin=False)
    ready(reg, "red", 10, "red/y", 2)
    state = ready(reg, "red", 10, "red/z", 3)
    assert (state is PrefixState.READY) == (budgets is None)
    assert (reg.get("gold/x", "gold").state is PrefixState.READY) == (budgets is not None)
