"""build_graph: a team's workflow as a LangGraph ``StateGraph``.

    START -> register_context -> [plan] -> Send(agent_turn) x workers -> join
          join -> next round ([plan] -> Send ...) | reduce -> finish -> END

- ``register_context`` pins the team's shared context as its HOT prefix through the
  platform and records what the platform read back (idempotent: the same text already
  pinned is reused, see ``TeamBackend.pin_context``).
- ``agent_turn`` runs once per ``Send``: one agent's own messages after the shared
  context. Parallel turns merge through the ``turns`` reducer.
- ``join`` closes a round; ``reduce`` is the reducer agent's turn; ``finish`` reads the
  context back (was it still the pinned prefix at the end?).
Nodes that call the platform carry the retry policy: a replica restarting is retried,
not a failed run. The backend arrives per run as the runtime context (``RunContext``),
so the graph itself is built from the team alone.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from langchain_core.language_models import BaseChatModel
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from langgraph.types import RetryPolicy, Send

from granikv_agents.binding import LLMCallError, TeamBackend, TurnRequest, is_transient
from granikv_agents.prompts import plan_turn, reduce_turn, work_turns
from granikv_agents.state import AgentTurnInput, ContextPin, TeamState, Turn, TurnInput
from granikv_agents.team import Team


@dataclass(frozen=True)
class RunContext:
    """What a run binds at invocation (not checkpointed). ``turns`` bounds the LLM calls
    in flight (``limits.concurrency``). It is not LangGraph's ``max_concurrency``: that
    one also queues the checkpointer's writes behind waiting tasks, so a turn that
    finished would stay unsaved until its superstep ends."""

    backend: TeamBackend
    turns: asyncio.Semaphore
    team: Team | None = None  # graphs of one's own read the team here (``kit``)
    model: BaseChatModel | None = None  # the team's chat model (``kit.team_model``)

    @classmethod
    def of(cls, team: Team, backend: TeamBackend,
           model: BaseChatModel | None = None) -> RunContext:
        return cls(backend, asyncio.Semaphore(team.limits.concurrency), team, model)


@dataclass(frozen=True)
class RetryConfig:
    """Backoff of a transient failure: 0.5, 1, 2, 4, then 8 s; 10 attempts wait about
    48 s in all, enough for Serve to restart an LLM replica (15-50 s)."""

    max_attempts: int = 10
    initial_interval_s: float = 0.5
    backoff_factor: float = 2.0
    max_interval_s: float = 8.0

    def policy(self) -> RetryPolicy:
        return RetryPolicy(initial_interval=self.initial_interval_s,
                           backoff_factor=self.backoff_factor,
                           max_interval=self.max_interval_s,
                           max_attempts=self.max_attempts, retry_on=is_transient)


def build_graph(team: Team, retry: RetryConfig | None = None) -> StateGraph[Any, Any, Any, Any]:
    """The uncompiled graph; ``.compile(checkpointer=...)`` it."""
    policy = (retry or RetryConfig()).policy()
    g: StateGraph[Any, Any, Any, Any] = StateGraph(TeamState, context_schema=RunContext)
    g.add_node("register_context", _register(team), retry_policy=policy)
    g.add_node("agent_turn", _agent_turn(team), retry_policy=policy)
    g.add_node("join", _join)
    g.add_node("reduce", _reduce(team), retry_policy=policy)
    g.add_node("finish", _finish, retry_policy=policy)
    fan_out = _fan_out(team)
    g.add_edge(START, "register_context")
    if team.planner is not None:
        g.add_node("plan", _plan(team), retry_policy=policy)
        g.add_edge("register_context", "plan")
        g.add_conditional_edges("plan", fan_out, ["agent_turn"])
    else:
        g.add_conditional_edges("register_context", fan_out, ["agent_turn"])
    g.add_edge("agent_turn", "join")
    g.add_conditional_edges("join", _after_join(team, fan_out),
                            ["plan", "agent_turn", "reduce"] if team.planner else
                            ["agent_turn", "reduce"])
    g.add_edge("reduce", "finish")
    g.add_edge("finish", END)
    return g


# ---- routing (pure) ---------------------------------------------------------------------
def _fan_out(team: Team) -> Callable[[TeamState], list[Send]]:
    def fan_out(state: TeamState) -> list[Send]:
        ctx = state["context"]
        return [Send("agent_turn", AgentTurnInput(**t, context=ctx))
                for t in work_turns(team, state.get("turns", []), state["round"])]

    return fan_out


def _after_join(team: Team, fan_out: Callable[[TeamState], list[Send]]
                ) -> Callable[[TeamState], str | list[Send]]:
    def route(state: TeamState) -> str | list[Send]:
        if state["round"] > team.limits.rounds:
            return "reduce"
        return "plan" if team.planner is not None else fan_out(state)

    return route


# ---- nodes --------------------------------------------------------------------------------
def _register(team: Team) -> Callable[..., Any]:
    async def register_context(state: TeamState, runtime: Runtime[RunContext]) -> TeamState:
        pin = await runtime.context.backend.pin_context(team.context)
        return {"context": pin, "round": 1, "task": team.task}

    return register_context


def _agent_turn(team: Team) -> Callable[..., Any]:
    async def agent_turn(inp: AgentTurnInput, runtime: Runtime[RunContext]) -> TeamState:
        return {"turns": [await _call(team, runtime, inp, inp["context"])]}

    return agent_turn


def _join(state: TeamState) -> TeamState:
    return {"round": state["round"] + 1}


def _plan(team: Team) -> Callable[..., Any]:
    async def plan(state: TeamState, runtime: Runtime[RunContext]) -> TeamState:
        inp = plan_turn(team, state.get("turns", []), state["round"])
        return {"turns": [await _call(team, runtime, inp, state["context"])]}

    return plan


def _reduce(team: Team) -> Callable[..., Any]:
    async def reduce(state: TeamState, runtime: Runtime[RunContext]) -> TeamState:
        inp = reduce_turn(team, state.get("turns", []))
        turn = await _call(team, runtime, inp, state["context"])
        return {"turns": [turn], "result": turn["text"]}

    return reduce


async def _finish(state: TeamState, runtime: Runtime[RunContext]) -> TeamState:
    after = await runtime.context.backend.read_context()
    if after is None:
        raise LLMCallError(404, "the team context disappeared during the run")
    return {"context_after": after}


async def _call(team: Team, runtime: Runtime[RunContext], inp: TurnInput,
                ctx: ContextPin) -> Turn:
    """One LLM call of one agent: the Turn the state keeps."""
    agent = team.agent(inp["agent"])
    request = TurnRequest(agent=agent.name, round=inp["round"], kind=inp["kind"],
                          messages=tuple((m[0], m[1]) for m in inp["messages"]),
                          sampling=agent.sampling)
    async with runtime.context.turns:
        reply = await runtime.context.backend.chat(request, ctx)
    return Turn(agent=agent.name, index=agent.index, round=inp["round"], kind=inp["kind"],
                text=reply.text, prompt_tokens=reply.prompt_tokens,
                completion_tokens=reply.completion_tokens)
