"""TeamBudgets: how many HOT slots each team's prefixes may hold together.

Everything of a team in the arena counts against its budget: its registered prefixes
(pinned or not), its context and the context's variants, the engine's implicit prefixes
of its prompts, and a replaced record its last readers still hold. ``PrefixRegistry``
keeps every team within its budget and never makes room for one team by evicting
another's entry (only the team's own unpinned entries, or those of a team over its
budget), so while the budgets of the teams add up to at most the arena, whatever a
team registers within its budget finds room, whatever the other teams hold.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class TeamBudgets:
    default: int  # a team without a budget of its own
    teams: Mapping[str, int] = field(default_factory=dict, hash=False)

    def of(self, team: str) -> int:
        return self.teams.get(team, self.default)

    def total(self) -> int:
        """The budgets of the named teams together."""
        return sum(self.teams.values())

    @classmethod
    def share(cls, arena: int, teams: Mapping[str, int | None], default: int = 0,
              floor: int = 0) -> TeamBudgets:
        """Budgets in an arena of ``arena`` slots. ``teams``: the configured teams, each
        with its own budget or None (the default). ``default`` 0: an equal share of the
        arena among the configured teams (the whole arena without any), but at least
        ``floor`` (a prefix of the largest size the caller allows). None exceeds the
        arena."""
        if default <= 0:
            default = max(arena // len(teams) if teams else arena, floor)
        default = min(default, arena)
        own = {t: min(b if b is not None else default, arena) for t, b in teams.items()}
        return cls(default, own)
