"""The platform's pieces for graphs of one's own: ordinary LangGraph nodes and helpers.

    from granikv_agents.kit import TeamMessages, fan_out, register_context, team_model

- ``register_context``: a node that pins the team's shared context as its HOT prefix and
  records the pin the platform read back (``state["context"]``);
- ``fan_out(node, payloads)``: one ``Send`` per payload (parallel agent turns);
- ``team_model(runtime, agent)``: the team's chat model (``ChatOpenAI``'s interface), with
  that agent's sampling; ``agent_messages`` puts the agent's role into the conversation
  (folded into the first user message: one system message, the platform's context);
- ``TeamMessages``: ``MessagesState`` (``add_messages``) plus the context pin;
- ``roles(team)``: who plans, who works in parallel, who joins (a spec's ``workflow``
  names them; without one, by position); ``task_of(state, team)``: the last message, or
  the spec's task when a run starts without input.
The runtime context of a run is ``graph.RunContext``: the team, its backend, its model.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage, SystemMessage
from langgraph.graph import MessagesState
from langgraph.runtime import Runtime
from langgraph.types import Send

from granikv_agents.chat_model import conversation
from granikv_agents.graph import RunContext
from granikv_agents.state import ContextPin
from granikv_agents.team import Agent, Team


class TeamMessages(MessagesState, total=False):
    """Messages (``add_messages``) and the team's context pin."""

    context: ContextPin


@dataclass(frozen=True)
class Roles:
    planner: Agent | None
    workers: tuple[Agent, ...]  # the parallel turns
    joiner: Agent  # joins the workers' turns (synthesizer, judge, integrator)


def roles(team: Team, planner: bool = False) -> Roles:
    """The roles of a team: those its spec's ``workflow`` names (``reducer``,
    ``planner``), else by position: the first agent plans (when ``planner``), the last
    joins, the others work."""
    if team.workflow is not None:
        if planner and team.planner is None:
            raise ValueError(f"team {team.name}: this graph needs a workflow.planner")
        return Roles(team.planner, team.workers, team.reducer)
    first = 1 if planner else 0
    if len(team.agents) < first + 2:
        raise ValueError(f"team {team.name}: {len(team.agents)} agents; this graph needs "
                         f"at least {first + 2}")
    return Roles(team.agents[0] if planner else None, team.agents[first:-1],
                 team.agents[-1])


def task_of(state: Any, team: Team) -> str:
    """The run's task: its last message, or the spec's ``task`` for a run without one."""
    messages = state.get("messages") or []
    return str(messages[-1].content) if messages else team.task


def run_team(runtime: Runtime[RunContext]) -> Team:
    team = runtime.context.team
    if team is None:
        raise ValueError("this graph needs its team: run it with RunContext.of(team, ...)")
    return team


async def register_context(state: Any,
                           runtime: Runtime[RunContext]) -> dict[str, Any]:
    """Node: pin the team's context (idempotent) and record the pin read back."""
    pin = await runtime.context.backend.pin_context(run_team(runtime).context)
    return {"context": pin}


def fan_out(node: str, payloads: Iterable[Any]) -> list[Send]:
    """One ``Send(node, payload)`` per payload: LangGraph runs them in parallel."""
    return [Send(node, p) for p in payloads]


def team_model(runtime: Runtime[RunContext], agent: str | None = None) -> BaseChatModel:
    """The team's chat model; with ``agent``, bound to that agent's sampling."""
    model = runtime.context.model
    if model is None:
        raise ValueError("this run has no chat model: RunContext.of(team, backend, model)")
    if agent is None:
        return model
    s = run_team(runtime).agent(agent).sampling
    fields = type(model).model_fields
    update = {k: v for k, v in (("agent", agent), ("max_tokens", s.max_tokens),
                                ("temperature", s.temperature), ("seed", s.seed))
              if k in fields}
    return model.model_copy(update=update)


def agent_messages(team: Team, agent: str, messages: Sequence[BaseMessage]
                   ) -> list[BaseMessage]:
    """``messages`` as ``agent`` says them: its role first, inside the first user
    message (see ``chat_model.conversation``)."""
    a = team.agent(agent)
    return conversation([SystemMessage(f"You are {a.name}. {a.role}"), *messages])

