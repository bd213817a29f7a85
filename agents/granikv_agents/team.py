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
    role: str  # its own instructions, at the start of its first user message
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
    workflow: Workflow | None  # None: the team runs its own graph
    limits: Limits
    graph: str | None = None  # "module:function" of that graph

    @property
    def shape(self) -> Workflow:
        """The built-in workflow (a team with its own graph has none)."""
        if self.workflow is None:
            raise ValueError(f"team {self.name} runs its own graph ({self.graph}), not a "
                             "built-in shape")
        return self.workflow

    def agent(self, name: str) -> Agent:
        for a in self.agents:
            if a.name == name:
                return a
        raise KeyError(f"team {self.name} has no agent {name!r}")

    @property
    def reducer(self) -> Agent:
        return self.agent(self.shape.reducer)

    @property
    def planner(self) -> Agent | None:
        p = self.workflow.planner if self.workflow is not None else None
        return self.agent(p) if p is not None else None

    @property
    def workers(self) -> tuple[Agent, ...]:
        """The agents of the parallel turns (debaters, reviewers, executors)."""
        wf = self.workflow
        special = {wf.reducer, wf.planner} if wf is not None else set()
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
