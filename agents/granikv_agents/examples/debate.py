"""The debate shape written with the kit: the workers argue for ``limits.rounds``
rounds (from round 2 each sees the others' last arguments), then the joiner judges
(``kit.roles``: the spec's workflow, or every agent but the last, then the last).

    graph: granikv_agents.examples.debate:graph
"""

from __future__ import annotations

import operator
from typing import Annotated, Any

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.graph import START, StateGraph
from langgraph.runtime import Runtime
from langgraph.types import Send
from typing_extensions import TypedDict

from granikv_agents.graph import RunContext
from granikv_agents.kit import (
    TeamMessages,
    agent_messages,
    fan_out,
    register_context,
    roles,
    run_team,
    task_of,
    team_model,
)


class Debate(TeamMessages, total=False):
    round: int  # the round the next fan-out argues (1-based)
    arguments: Annotated[list[list[Any]], operator.add]  # [round, agent, text]


class Turn(TypedDict):
    agent: str
    round: int
    motion: str
    others: list[list[Any]]  # the other debaters' arguments of the last round


def _said(state: Debate, round_: int) -> list[list[Any]]:
    return [a for a in state.get("arguments", []) if a[0] == round_]


def argue_round(state: Debate, runtime: Runtime[RunContext]) -> list[Send] | str:
    team, r = run_team(runtime), state.get("round", 1)
    if r > team.limits.rounds:
        return "judge"
    last = _said(state, r - 1)
    return fan_out("argue", [Turn(agent=a.name, round=r,
                                  motion=task_of(state, team),
                                  others=[x for x in last if x[1] != a.name])
                             for a in roles(team).workers])


async def argue(inp: Turn, runtime: Runtime[RunContext]) -> dict[str, Any]:
    ask = inp["motion"] if inp["round"] == 1 else (
        f"Round {inp['round']}. The others argued:\n"
        + "\n".join(f"- {agent}: {text}" for _, agent, text in inp["others"])
        + "\nAnswer them.")
    msgs = agent_messages(run_team(runtime), inp["agent"], [HumanMessage(ask)])
    reply = await team_model(runtime, inp["agent"]).ainvoke(msgs)
    return {"arguments": [[inp["round"], inp["agent"], str(reply.content)]]}


def close_round(state: Debate) -> dict[str, Any]:
    return {"round": state.get("round", 1) + 1}


async def judge(state: Debate, runtime: Runtime[RunContext]) -> dict[str, Any]:
    team = run_team(runtime)
    last = _said(state, team.limits.rounds)
    listing = "\n".join(f"- {agent}: {text}" for _, agent, text in last)
    name = roles(team).joiner.name
    msgs = agent_messages(team, name, [HumanMessage(
        f"The last round:\n{listing}\n\nSay which argument wins, and why.")])
    reply = await team_model(runtime, name).ainvoke(msgs)
    return {"messages": [AIMessage(str(reply.content), name=name)]}


def graph() -> StateGraph[Any, Any, Any, Any]:
    g: StateGraph[Any, Any, Any, Any] = StateGraph(Debate, context_schema=RunContext)
    g.add_node("register_context", register_context)
    g.add_node("argue", argue)  # type: ignore[arg-type]  # a Send payload, not the state
    g.add_node("close_round", close_round)
    g.add_node("judge", judge)
    g.add_edge(START, "register_context")
    g.add_conditional_edges("register_context", argue_round, ["argue", "judge"])
    g.add_edge("argue", "close_round")
    g.add_conditional_edges("close_round", argue_round, ["argue", "judge"])
    return g
