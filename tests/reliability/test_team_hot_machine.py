"""A hypothesis state machine of HOT filling by one team, over the engine's registry and
the platform's.

``PrefixRegistry`` (granikv_engine) with per-team budgets that add up to the arena, and
the platform's ``RegistryState`` deciding pins with the same budgets, as a replica uses
them (``PrefixSync``: registry first, then the engine). A hostile team (``red``) mostly
registers (pinned or not, up to its whole budget at a time), the engine promotes
implicit prefixes for every team, requests read prefixes, fills finish or abort and
prefixes go. After every step: no team holds more HOT slots than its budget, the
registry's pins of a team are within its budget, and a registration never took another
team's entry. A registration of a team within its budget (its unpinned entries given
up) is HOT unless a read entry keeps the arena from compacting."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from granikv_engine.hot_budget import TeamBudgets
from granikv_engine.hot_pool import HotPool
from granikv_engine.prefix_registry import (
    PrefixQuotaExceeded,
    PrefixRecord,
    PrefixRegistry,
    PrefixState,
)
from granikv_platform.registry import PrefixSpec, RegistryState
from tests.reliability.machines import RUNS, count, record_counts


@pytest.fixture(scope="module", autouse=True)
def _figures() -> Iterator[None]:
    yield from record_counts()


TEAMS = ("red", "blue", "gold", "green")
ARENA = 120
BUDGETS = TeamBudgets.share(ARENA, {"red": None, "blue": 40, "gold": None, "green": None})
IMPLICIT = 60  # slots implicit prefixes may hold together


def tokens(team: str, k: int, n: int) -> tuple[int, ...]:
    seed = TEAMS.index(team) * 100 + k
    return tuple((seed * 7919 + 104729 * j) % 32000 + 1 for j in range(n))


class TeamHotMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.reg = PrefixRegistry(HotPool(1, ARENA), budgets=BUDGETS)
        self.state = RegistryState()
        self.reads: list[PrefixRecord] = []

    # ---- rules ------------------------------------------------------------------------
    @rule(k=st.integers(0, 11), n=st.integers(1, BUDGETS.of("red")), pin=st.booleans(),
          fill=st.booleans())
    def red_fills(self, k: int, n: int, pin: bool, fill: bool) -> None:
        self._register("red", k, n, pin, fill)

    @rule(team=st.sampled_from(TEAMS[1:]), k=st.integers(0, 3), n=st.integers(1, 40),
          pin=st.booleans(), fill=st.booleans())
    def another_registers(self, team: str, k: int, n: int, pin: bool, fill: bool) -> None:
        self._register(team, k, n, pin, fill)

    @rule(team=st.sampled_from(TEAMS), k=st.integers(0, 5), n=st.integers(1, 30))
    def engine_promotes(self, team: str, k: int, n: int) -> None:
        others = self._others_hot(team)
        rec = self.reg.promote(team, tokens(team, 50 + k, n), IMPLICIT)
        assert others <= self._others_hot(team), "a promotion took another team's entry"
        count("team_hot", "promoted" if rec is not None else "promotion_refused")

    @rule(i=st.integers(0, 40))
    def read(self, i: int) -> None:
        ready = [r for r in self.reg.records() if r.state is PrefixState.READY]
        if ready:
            rec = ready[i % len(ready)]
            if self.reg.acquire(rec.prefix_id) is not None:
                self.reads.append(rec)

    @rule(i=st.integers(0, 40))
    def read_ends(self, i: int) -> None:
        if self.reads:
            self.reg.release(self.reads.pop(i % len(self.reads)))

    @rule(i=st.integers(0, 40), abort=st.booleans())
    def fill_ends(self, i: int, abort: bool) -> None:
        filling = [r for r in self.reg.records() if r.state is PrefixState.FILLING]
        if filling:
            rec = filling[i % len(filling)]
            self.reg.abort_fill(rec) if abort else self.reg.mark_ready(rec)

    @rule(i=st.integers(0, 40))
    def delete(self, i: int) -> None:
        specs = self.state.list_specs()
        if specs:
            spec = specs[i % len(specs)]
            self.state.delete(spec.prefix_id, spec.team)
            if self.reg.peek(spec.prefix_id) is not None:
                self.reg.unregister(spec.prefix_id, spec.team)

    def _register(self, team: str, k: int, n: int, pin: bool, fill: bool) -> None:
        spec = PrefixSpec(f"p{k}", team, tokens(team, k, n), pin=pin)
        if spec.prefix_id in self.state.specs:  # the API's: delete it first
            return
        try:
            self.state.put(spec, BUDGETS.of(team))
        except PrefixQuotaExceeded:
            assert self.state.pinned_tokens(team) + n > BUDGETS.of(team)
            count("team_hot", "pin_refused")
            return
        kept = self._held(team) - self._evictable(team)
        others = self._others_hot(team)
        rec = self.reg.register(team, spec.token_ids, spec.prefix_id, pin=pin)
        assert others <= self._others_hot(team), "a registration took another team's entry"
        if kept + n <= BUDGETS.of(team) and rec.state is PrefixState.COLD:
            assert any(self.reg.pool.counts(key)[1] for key in self.reg.pool.keys()), \
                "within its budget, yet COLD with nothing read"
        count("team_hot", f"{'red' if team == 'red' else 'other'}_{rec.state.value}")
        if fill and rec.state is PrefixState.FILLING:
            self.reg.mark_ready(rec)

    # ---- the model ------------------------------------------------------------------
    def _held(self, team: str) -> int:
        return self.reg.team_slots().get(team, 0)

    def _evictable(self, team: str) -> int:
        return sum(self.reg.pool.range_of(key).length for key in self.reg.pool.evictable()
                   if self.reg._owner(key) == team)

    def _others_hot(self, team: str) -> set[object]:
        return {r.key for r in self.reg.records() if r.team != team and r.hot is not None}

    @invariant()
    def each_team_within_its_budget(self) -> None:
        for team, used in self.reg.team_slots().items():
            assert used <= BUDGETS.of(team), (team, used)
        for team in TEAMS:
            assert self.state.pinned_tokens(team) <= BUDGETS.of(team), team
        assert self.reg.pool.stats().used <= ARENA

    def teardown(self) -> None:
        for rec in self.reads:
            self.reg.release(rec)
        count("team_hot", "runs")


TestTeamHot = TeamHotMachine.TestCase
TestTeamHot.settings = RUNS
