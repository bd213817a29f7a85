"""Human in the loop: an agent drafts, a person approves or sends it back.

    graph: granikv_agents.examples.approve:graph
``review`` calls ``interrupt()``: the run stops and the thread shows the draft. A run
with ``command={"resume": "yes"}`` publishes it; any other answer is a note that the
agent revises with, and the draft is shown again.
"""

from __future__ import annotations

from typing import Any, Literal

from langchain_core.messages import HumanMessage
from langgraph.graph import START, StateGraph
from langgraph.runtime import Runtime
from langgraph.types import Command, interrupt

from granikv_agents.graph import RunContext
from granikv_agents.kit import TeamMessages, team_model


class Approval(TeamMessages, total=False):
    approved: bool


async def draft(state: Approval, runtime: Runtime[RunContext]) -> dict[str, Any]:
    return {"messages": [await team_model(runtime).ainvoke(state["messages"])]}


def review(state: Approval) -> Command[Literal["draft", "__end__"]]:
    answer = interrupt({"draft": str(state["messages"][-1].content),
                        "ask": "Publish this? Answer 'yes' or a note to revise it."})
    if str(answer).strip().lower() == "yes":
        return Command(goto="__end__", update={"approved": True})
    return Command(goto="draft", update={"messages": [HumanMessage(f"Revise: {answer}")]})


def graph() -> StateGraph[Any, Any, Any, Any]:
    g: StateGraph[Any, Any, Any, Any] = StateGraph(Approval, context_schema=RunContext)
    g.add_node("draft", draft)
    g.add_node("review", review)
    g.add_edge(START, "draft")
    g.add_edge("draft", "review")
    return g
