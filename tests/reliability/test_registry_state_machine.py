"""A hypothesis state machine over the platform's prefix registry (``RegistryState``,
granikv_platform): three teams register, delete and read the same ids
(``CrossTeamIdsMachine``)."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from granikv_engine.prefix_registry import PrefixConflict, PrefixNotFound
from granikv_platform.registry import PrefixSpec, RegistryState, scoped_id, team_id
from tests.reliability.machines import RUNS, count, record_counts


@pytest.fixture(scope="module", autouse=True)
def _figures() -> Iterator[None]:
    yield from record_counts()


# ---- RegistryState: cross-team ids ------------------------------------------------------
SCOPED_TEAMS = ("red", "blue", "gold")
SHARED_IDS = ("doc", "red-doc", "blue-context-1", "gold/doc", "x:1")  # every team may try each


class CrossTeamIdsMachine(RuleBasedStateMachine):
    """The platform's RegistryState (granikv_platform) as teams use it: each team
    registers, deletes and reads ids that other teams use too (a team's name in an id,
    another team's scoped form, a variant-like id), sets contexts, and the registry
    reloads from its file. Model: (team, id) -> tokens. After every step each team
    reads exactly its own prefixes, and an id it does not have is PrefixNotFound with
    the message an id nobody has gets."""

    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.TemporaryDirectory()
        self.path = Path(self.dir.name) / "registry.json"
        self.st = RegistryState(self.path)
        self.model: dict[tuple[str, str], tuple[int, ...]] = {}
        self.contexts: dict[str, str] = {}  # team -> its context's id (its own)
        count("cross_team_ids", "runs")

    @rule(team=st.sampled_from(SCOPED_TEAMS), pid=st.sampled_from(SHARED_IDS),
          tok=st.integers(1, 3))
    def put(self, team: str, pid: str, tok: int) -> None:
        tokens = (tok, len(team))
        key = (team, scoped_id(team, pid))
        try:
            _, created = self.st.put(PrefixSpec(pid, team, tokens, pin=True))
        except PrefixConflict:
            assert self.model[key] != tokens
            count("cross_team_ids", "own_conflicts")
            return
        assert created == (key not in self.model)
        self.model[key] = tokens
        count("cross_team_ids", "puts")

    @rule(team=st.sampled_from(SCOPED_TEAMS), pid=st.sampled_from(SHARED_IDS))
    def delete(self, team: str, pid: str) -> None:
        key = (team, scoped_id(team, pid))
        if key not in self.model:
            with pytest.raises(PrefixNotFound):
                self.st.delete(pid, team)
            count("cross_team_ids", "absent_deletes")
            return
        self.st.delete(pid, team)
        del self.model[key]
        if self.contexts.get(team) == key[1]:
            del self.contexts[team]
        count("cross_team_ids", "deletes")

    @rule(team=st.sampled_from(SCOPED_TEAMS), n=st.integers(1, 2))
    def set_context(self, team: str, n: int) -> None:
        pid = f"{team}-context-{n}" if n == 1 else "blue-context-1"  # blue's own id, too
        key = (team, scoped_id(team, pid))
        if key in self.model and self.model[key] != (9, n):
            return  # its own id holds a prefix: a PUT context makes another id in practice
        self.st.set_context(PrefixSpec(pid, team, (9, n), kind="context", text=str(n)))
        old = self.contexts.get(team)
        if old is not None and old != key[1]:
            self.model.pop((team, old), None)
        self.model[key] = (9, n)
        self.contexts[team] = key[1]
        count("cross_team_ids", "contexts")

    @rule()
    def reload(self) -> None:
        again = RegistryState(self.path)
        assert again.specs == self.st.specs and again.contexts == self.st.contexts
        self.st = again
        count("cross_team_ids", "reloads")

    @invariant()
    def each_team_reads_its_own_only(self) -> None:
        for team in SCOPED_TEAMS:
            mine = {s.prefix_id: s.token_ids for s in self.st.list_specs(team)}
            assert mine == {pid: t for (tm, pid), t in self.model.items() if tm == team}
            for pid in SHARED_IDS:
                key = (team, scoped_id(team, pid))
                if key in self.model:
                    assert self.st.get(pid, team).token_ids == self.model[key]
                    continue
                with pytest.raises(PrefixNotFound) as e:
                    self.st.get(pid, team)
                with pytest.raises(PrefixNotFound) as nobody:
                    self.st.get("nobodys-id", team)
                shown = team_id(key[1])  # the id as its team names it
                assert str(e.value.args[0]).replace(shown, "ID") == str(
                    nobody.value.args[0]).replace("nobodys-id", "ID")
            ctx = self.st.context(team)
            assert (ctx.prefix_id if ctx else None) == self.contexts.get(team)

    def teardown(self) -> None:
        self.dir.cleanup()


TestCrossTeamIds = CrossTeamIdsMachine.TestCase
TestCrossTeamIds.settings = RUNS
