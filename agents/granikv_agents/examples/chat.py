"""A conversation with the team: the context pinned, then one agent answers each turn.

    graph: granikv_agents.examples.chat:graph
Each run adds the user's messages; the thread's checkpoints carry the conversation, so
the next run on the thread continues it.
"""

from __future__ import annotations

from typing import Any

from langgraph.graph import START, StateGraph
from langgraph.runtime import Runtime

from granikv_agents.graph import RunContext
from granikv_agents.kit import TeamMessages, agent_messages, register_context, run_team, team_model


async def answer(state: TeamMessages, runtime: Runtime[RunContext]) -> dict[str, Any]:
    team = run_team(runtime)
    agent = team.agents[0].name if team.agents else None
    messages = (agent_messages(team, agent, state["messages"]) if agent
                else list(state["messages"]))
    return {"messages": [await team_model(runtime, agent).ainvoke(messages)]}


def graph() -> StateGraph[Any, Any, Any, Any]:
    g: StateGraph[Any, Any, Any, Any] = StateGraph(TeamMessages, context_schema=RunContext)
    g.add_node("register_context", register_context)
    g.add_node("answer", answer)
    g.add_edge(START, "register_context")
    g.add_edge("register_context", "answer")
    return g
