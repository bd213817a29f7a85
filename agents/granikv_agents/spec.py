"""TeamSpec: the pydantic schema of a team (``deploy/teams/*.yaml``, or the body of
``POST /teams/{team}/runs``), validated at the edge and turned into the frozen ``Team``
that the graph uses (``to_team``).

A spec names the team, its shared context (pinned as the team's HOT prefix), its agents
(role instructions and sampling), and either one of the built-in workflow shapes or a
LangGraph graph of one's own (``graph: module:function``), and its limits. ``context_file``
is read only when the spec comes from a file: ``spec_file.load_spec`` passes the file's
folder as the validation context; a spec sent over HTTP must carry its context inline.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from granikv_agents.team import Agent, Limits, Sampling, Team, Workflow
from granikv_platform.names import TEAM_RE

AGENT_RE = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")
GRAPH_RE = r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$"  # module:function
Shape = Literal["map_reduce", "debate", "pipeline"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SamplingSpec(_Strict):
    max_tokens: int | None = Field(None, ge=1, description="Tokens per turn; default the "
                                   "team's sampling, then limits.max_tokens.")
    temperature: float | None = Field(None, ge=0.0, le=2.0, description="0 is greedy.")
    seed: int | None = Field(None, ge=0, description="Sampling seed of this agent.")


class AgentSpec(_Strict):
    name: str = Field(description="Unique in the team: lowercase letters, digits, '-', '_'.")
    role: str = Field(min_length=1, description="The agent's own instructions (they open "
                      "its first user message, after the shared context; COLD slots).")
    sampling: SamplingSpec = Field(default_factory=lambda: SamplingSpec.model_validate({}))

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not AGENT_RE.match(v):
            raise ValueError(f"agent name {v!r} must match {AGENT_RE.pattern}")
        return v


class WorkflowSpec(_Strict):
    shape: Shape = Field(description="map_reduce: workers in parallel, then the reducer. "
                         "debate: debaters in parallel for several rounds, each seeing the "
                         "others' last arguments, then the reducer judges. pipeline: the "
                         "planner plans, executors work in parallel on the plan, then the "
                         "reducer integrates.")
    reducer: str = Field(description="The agent that joins the turns (synthesizer, judge, "
                         "integrator); it runs once, after the last round.")
    planner: str | None = Field(None, description="pipeline only: the agent that plans "
                                "each round before the executors.")


class LimitsSpec(_Strict):
    rounds: int = Field(1, ge=1, le=16, description="Rounds of parallel turns (debate: "
                        "at least 2).")
    max_tokens: int = Field(256, ge=1, le=4096, description="Upper bound of any agent's "
                            "max_tokens, and the default.")
    concurrency: int = Field(8, ge=1, le=256, description="Agent turns in flight at once.")


class TeamSpec(_Strict):
    team: str = Field(description="The platform team that runs it (its routes, its HOT "
                      "prefix).")
    description: str = ""
    context: str | None = Field(None, description="The shared context, inline.")
    context_file: str | None = Field(None, description="Spec files only: the shared "
                                     "context's file, relative to the spec file.")
    task: str = Field("Do your part, briefly.", min_length=1, description="What every "
                      "agent is asked; POST /runs may replace it.")
    sampling: SamplingSpec = Field(default_factory=lambda: SamplingSpec.model_validate({}),
                                   description="Defaults of every agent's sampling.")
    agents: list[AgentSpec] = Field(default_factory=list, max_length=256)
    workflow: WorkflowSpec | None = Field(None, description="A built-in shape; give it or "
                                          "'graph'.")
    graph: str | None = Field(None, pattern=GRAPH_RE, description="'module:function' "
                              "returning a StateGraph or a compiled graph (called with the "
                              "Team if it takes an argument); give it or 'workflow'.")
    limits: LimitsSpec = Field(default_factory=lambda: LimitsSpec.model_validate({}))

    @field_validator("team")
    @classmethod
    def _team(cls, v: str) -> str:
        if not TEAM_RE.match(v):
            raise ValueError(f"team name {v!r} must match {TEAM_RE.pattern}")
        return v

    @model_validator(mode="after")
    def _context(self, info: ValidationInfo) -> TeamSpec:
        if (self.context is None) == (self.context_file is None):
            raise ValueError("give exactly one of 'context' or 'context_file'")
        if self.context_file is not None:
            base = (info.context or {}).get("base_dir")
            if base is None:
                raise ValueError("context_file is only read from spec files; send the "
                                 "context text inline")
            path = Path(base) / self.context_file
            if not path.is_file():
                raise ValueError(f"no context file {self.context_file!r} beside the spec")
            object.__setattr__(self, "context", path.read_text())
            object.__setattr__(self, "context_file", None)
        if not (self.context or "").strip():
            raise ValueError("the shared context is empty")
        return self

    @model_validator(mode="after")
    def _roles(self) -> TeamSpec:
        names = [a.name for a in self.agents]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"duplicate agent names {dup}")
        if (self.workflow is None) == (self.graph is None):
            raise ValueError("give exactly one of 'workflow' or 'graph'")
        wf = self.workflow
        if wf is None:
            return self  # a graph of one's own: its agents are whatever it uses
        if len(names) < 2:
            raise ValueError("a built-in workflow needs at least 2 agents")
        if wf.reducer not in names:
            raise ValueError(f"workflow.reducer {wf.reducer!r} is not an agent")
        if (wf.shape == "pipeline") != (wf.planner is not None):
            raise ValueError("workflow.planner is required by, and only allowed in, "
                             "the pipeline shape")
        if wf.planner is not None and wf.planner not in names:
            raise ValueError(f"workflow.planner {wf.planner!r} is not an agent")
        if wf.planner == wf.reducer:
            raise ValueError("the planner and the reducer must be different agents")
        workers = len(names) - 1 - (wf.planner is not None)
        if workers < (2 if wf.shape == "debate" else 1):
            raise ValueError(f"a {wf.shape} team needs "
                             f"{'two debaters' if wf.shape == 'debate' else 'a worker'} "
                             "besides the reducer and planner")
        if wf.shape == "debate" and self.limits.rounds < 2:
            raise ValueError("a debate needs limits.rounds >= 2")
        return self

    @model_validator(mode="after")
    def _token_limits(self) -> TeamSpec:
        cap = self.limits.max_tokens
        for owner, s in [("sampling", self.sampling),
                         *((f"agents.{a.name}.sampling", a.sampling) for a in self.agents)]:
            if s.max_tokens is not None and s.max_tokens > cap:
                raise ValueError(f"{owner}.max_tokens {s.max_tokens} exceeds "
                                 f"limits.max_tokens {cap}")
        return self

    def to_team(self, task: str | None = None) -> Team:
        """The frozen team the graph runs (``task`` replaces the spec's)."""
        return Team(
            name=self.team, context=self.context or "", task=task or self.task,
            agents=tuple(Agent(a.name, a.role, self._sampling(a), i)
                         for i, a in enumerate(self.agents)),
            workflow=None if self.workflow is None else Workflow(
                self.workflow.shape, self.workflow.reducer, self.workflow.planner),
            limits=Limits(self.limits.rounds, self.limits.max_tokens,
                          self.limits.concurrency),
            graph=self.graph)

    def _sampling(self, a: AgentSpec) -> Sampling:
        mine, team = a.sampling, self.sampling
        temperature = mine.temperature if mine.temperature is not None else team.temperature
        return Sampling(
            max_tokens=mine.max_tokens or team.max_tokens or self.limits.max_tokens,
            temperature=0.0 if temperature is None else temperature,
            seed=mine.seed if mine.seed is not None else team.seed)
