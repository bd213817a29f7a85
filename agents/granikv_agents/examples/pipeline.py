"""The pipeline shape written with the kit: the planner plans, the workers execute the
plan in parallel, the joiner integrates their results (``kit.roles``: the spec's
workflow, or the first agent, the ones between, the last).

    graph: granikv_agents.examples.pipeline:graph
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


class Pipeline(TeamMessages, total=False):
    plan: str
    results: Annotated[list[list[str]], operator.add]  # [agent, text], any order


class Step(TypedDict):
    agent: str
    plan: str


async def plan(state: Pipeline, runtime: Runtime[RunContext]) -> dict[str, Any]:
    team = run_team(runtime)
    r = roles(team, planner=True)
    planner = r.planner.name if r.planner is not None else ""  # roles() made sure
    workers = ", ".join(a.name for a in r.workers)
    msgs = agent_messages(team, planner, [HumanMessage(
        f"{task_of(state, team)}\n\nPlan the work, one step for each of: "
        f"{workers}.")])
    return {"plan": str((await team_model(runtime, planner).ainvoke(msgs)).content)}


def executors(state: Pipeline, runtime: Runtime[RunContext]) -> list[Send]:
    return fan_out("execute", [Step(agent=a.name, plan=state["plan"])
                               for a in roles(run_team(runtime), planner=True).workers])


async def execute(inp: Step, runtime: Runtime[RunContext]) -> dict[str, Any]:
    msgs = agent_messages(run_team(runtime), inp["agent"], [HumanMessage(
        f"The plan:\n{inp['plan']}\n\nDo your step.")])
    reply = await team_model(runtime, inp["agent"]).ainvoke(msgs)
    return {"results": [[inp["agent"], str(reply.content)]]}


async def integrate(state: Pipeline, runtime: Runtime[RunContext]) -> dict[str, Any]:
    team = run_team(runtime)
    order = {a.name: a.index for a in team.agents}
    listing = "\n".join(f"- {a}: {t}" for a, t in
                        sorted(state["results"], key=lambda r: order[r[0]]))
    name = roles(team, planner=True).joiner.name
    msgs = agent_messages(team, name, [HumanMessage(
        f"The plan:\n{state['plan']}\n\nThe results:\n{listing}\n\nIntegrate them.")])
    reply = await team_model(runtime, name).ainvoke(msgs)
    return {"messages": [AIMessage(str(reply.content), name=name)]}


def graph() -> StateGraph[Any, Any, Any, Any]:
    g: StateGraph[Any, Any, Any, Any] = StateGraph(Pipeline, context_schema=RunContext)
    g.add_node("register_context", register_context)
    g.add_node("plan", plan)
    g.add_node("execute", execute)  # type: ignore[arg-type]  # a Send payload
    g.add_node("integrate", integrate)
    g.add_edge(START, "register_context")
    g.add_edge("register_context", "plan")
    g.add_conditional_edges("plan", executors, ["execute"])
    g.add_edge("execute", "integrate")
    return g
