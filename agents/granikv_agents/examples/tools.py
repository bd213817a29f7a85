"""An agent with tools: the prebuilt ``ToolNode`` and ``tools_condition`` loop.

    graph: granikv_agents.examples.tools:graph
The model (``kit.team_model``, bound to the tools) answers or asks for tool calls; the
tools run and their results go back to it, until it answers without a call.
"""

from __future__ import annotations

from typing import Any

from langchain_core.tools import tool
from langgraph.graph import START, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.runtime import Runtime

from granikv_agents.graph import RunContext
from granikv_agents.kit import TeamMessages, team_model


@tool
def word_count(text: str) -> int:
    """The number of words of ``text``."""
    return len(text.split())


@tool
def review_rule(number: int) -> str:
    """The team's review rule ``number`` (1-5)."""
    rules = {1: "Teams never reach each other's prefixes.",
             2: "A prefix that does not fit HOT is refused, not evicted.",
             3: "Every error says what to do next.",
             4: "Every counter is exported as a metric.",
             5: "Findings are ordered by importance."}
    return rules.get(number, f"there is no rule {number}")


TOOLS = [word_count, review_rule]


async def agent(state: TeamMessages, runtime: Runtime[RunContext]) -> dict[str, Any]:
    model = team_model(runtime).bind_tools(TOOLS)
    return {"messages": [await model.ainvoke(state["messages"])]}


def graph() -> StateGraph[Any, Any, Any, Any]:
    g: StateGraph[Any, Any, Any, Any] = StateGraph(TeamMessages, context_schema=RunContext)
    g.add_node("agent", agent)
    g.add_node("tools", ToolNode(TOOLS))
    g.add_edge(START, "agent")
    g.add_conditional_edges("agent", tools_condition)
    g.add_edge("tools", "agent")
    return g
