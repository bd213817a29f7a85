"""Map-reduce written with the kit: the workers review in parallel (``fan_out``), the
joiner joins their findings (``kit.roles``: the spec's workflow, or every agent but the
last, then the last). The built-in ``map_reduce`` shape, as a
graph of one's own to start from.

    graph: granikv_agents.examples.review:graph
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


class Review(TeamMessages, total=False):
    findings: Annotated[list[list[str]], operator.add]  # [agent, text], any order


class Reviewer(TypedDict):
    agent: str
    task: str


def reviewers(state: Review, runtime: Runtime[RunContext]) -> list[Send]:
    team = run_team(runtime)
    task = task_of(state, team)
    return fan_out("review", [Reviewer(agent=a.name, task=task)
                              for a in roles(team).workers])


async def review(inp: Reviewer, runtime: Runtime[RunContext]) -> dict[str, Any]:
    msgs = agent_messages(run_team(runtime), inp["agent"], [HumanMessage(inp["task"])])
    reply = await team_model(runtime, inp["agent"]).ainvoke(msgs)
    return {"findings": [[inp["agent"], str(reply.content)]]}


async def synthesize(state: Review, runtime: Runtime[RunContext]) -> dict[str, Any]:
    team = run_team(runtime)
    order = {a.name: a.index for a in team.agents}
    listing = "\n".join(f"- {a}: {t}" for a, t in
                        sorted(state["findings"], key=lambda f: order[f[0]]))
    last = roles(team).joiner.name
    msgs = agent_messages(team, last, [HumanMessage(
        f"The findings:\n{listing}\n\nJoin them into one report.")])
    reply = await team_model(runtime, last).ainvoke(msgs)
    return {"messages": [AIMessage(str(reply.content), name=last)]}


def graph() -> StateGraph[Any, Any, Any, Any]:
    g: StateGraph[Any, Any, Any, Any] = StateGraph(Review, context_schema=RunContext)
    g.add_node("register_context", register_context)
    g.add_node("review", review)  # type: ignore[arg-type]  # a Send payload, not the state
    g.add_node("synthesize", synthesize)
    g.add_edge(START, "register_context")
    g.add_conditional_edges("register_context", reviewers, ["review"])
    g.add_edge("review", "synthesize")
    return g
