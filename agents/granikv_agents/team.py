"""The team as the graph sees it: frozen dataclasses built from a validated ``TeamSpec``.

Nothing here is read from YAML or HTTP; ``spec.TeamSpec.to_team`` makes these.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Shape = Literal["map_reduce", "debate", "pipeline"]


@dataclass(frozen=True)
class Sampling:
    max_tokens: int
    temperature: float
    seed: int | None


@dataclass(frozen=True)
class Agent:
    name: str
    role: str  # its own instructions: a system message after the shared context
    sampling: Sampling
    index: int  # position in the spec: the order of turns in prompts and results


@dataclass(frozen=True)
class Workflow:
    shape: Shape
    reducer: str
    planner: str | None = None


@dataclass(frozen=True)
class Limits:
    rounds: int
    max_tokens: int
    concurrency: int


@dataclass(frozen=True)
class Team:
    name: str
    context: str  # the shared context: the team's HOT prefix
    task: str
    agents: tuple[Agent, ...]
    workflow: Workflow
    limits: Limits

    def agent(self, name: str) -> Agent:
        for a in self.agents:
            if a.name == name:
                return a
        raise KeyError(f"team {self.name} has no agent {name!r}")

    @property
    def reducer(self) -> Agent:
        return self.agent(self.workflow.reducer)

    @property
    def planner(self) -> Agent | None:
        p = self.workflow.planner
        return self.agent(p) if p is not None else None

    @property
    def workers(self) -> tuple[Agent, ...]:
        """The agents of the parallel turns (debaters, reviewers, executors)."""
        special = {self.workflow.reducer, self.workflow.planner}
        return tuple(a for a in self.agents if a.name not in special)

    def calls_per_run(self) -> int:
        """LLM calls of a run that nothing interrupts: every round's workers (and
        planner), then the reducer once."""
        per_round = len(self.workers) + (self.planner is not None)
        return per_round * self.limits.rounds + 1

    def recursion_limit(self) -> int:
        """LangGraph supersteps of a run, with room: register, (plan, fan-out, join)
        per round, reduce, finish."""
        return 3 * self.limits.rounds + 8
