"""The kit's pieces in graphs of one's own (LangGraph and scripted models only): roles
folded into the conversation, the map-reduce example's fan-out, factories loaded by
name."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langgraph.graph import START, StateGraph

from granikv_agents.binding import TurnRequest
from granikv_agents.chat_model import conversation
from granikv_agents.graph import RunContext
from granikv_agents.graphs import GraphLoadError, team_graph
from granikv_agents.team import Sampling
from tests.agents.threads_kit import Echo, NoPlatform, own_team, script


def test_roles_join_the_first_user_message() -> None:
    out = conversation([SystemMessage("You are a."), HumanMessage("Q1", id="h1"),
                        AIMessage("A1"), SystemMessage("Be brief."), HumanMessage("Q2")])
    assert [m.type for m in out] == ["human", "ai", "human"]  # no system message left
    assert out[0].content == "Instructions: You are a.\nBe brief.\n\nQ1" and out[0].id == "h1"
    assert conversation([SystemMessage("Only rules.")])[0].content == "Instructions: Only rules."
    assert conversation([HumanMessage("plain")])[0].content == "plain"


def test_built_in_turns_send_roles_inside_the_first_user_message() -> None:
    sampling = Sampling(8, 0.0, None)
    req = TurnRequest("a", 2, "work", (("system", "You are a."), ("user", "Q1"),
                                       ("assistant", "A1"), ("user", "Q2")), sampling)
    assert req.dicts() == [{"role": "user", "content": "Instructions: You are a.\n\nQ1"},
                           {"role": "assistant", "content": "A1"},
                           {"role": "user", "content": "Q2"}]


class Pins(NoPlatform):
    """Records the contexts a graph pins (what the platform would make its HOT prefix)."""

    def __init__(self) -> None:
        self.pinned: list[str] = []

    async def pin_context(self, text: str) -> Any:
        self.pinned.append(text)
        return {"prefix_id": "p1", "length": 3, "state": "ready", "pinned": True,
                "hot_start": 0, "reused": False}


def test_map_reduce_example_fans_out_and_joins_with_roles() -> None:
    team = own_team("granikv_agents.examples.review:graph", agents=4)
    model = script("f0", "f1", "f2", "the report")
    pins = Pins()
    graph = team_graph(team)
    ctx = RunContext(pins, asyncio.Semaphore(4), team, model)  # type: ignore[arg-type]
    out = asyncio.run(graph.ainvoke({"messages": [HumanMessage("Review it.")]}, context=ctx))
    assert pins.pinned == ["The shared context."] and out["context"]["prefix_id"] == "p1"
    assert sorted(f[0] for f in out["findings"]) == ["a0", "a1", "a2"]  # the last one joins
    assert out["messages"][-1].content == "the report" and out["messages"][-1].name == "a3"
    edges = {(e.source, e.target) for e in graph.get_graph().edges}
    assert ("register_context", "review") in edges and ("review", "synthesize") in edges


def run_example(name: str, agents: int, **over: Any) -> tuple[dict[str, Any], Echo]:
    team = own_team(f"granikv_agents.examples.{name}:graph", agents=agents, **over)
    model = Echo()
    ctx = RunContext(Pins(), asyncio.Semaphore(4), team, model)  # type: ignore[arg-type]
    out = asyncio.run(team_graph(team).ainvoke({"messages": [HumanMessage("Go.")]},
                                               context=ctx))
    return out, model


def test_debate_example_shows_each_debater_the_others_last_arguments() -> None:
    out, model = run_example("debate", 3, limits={"rounds": 2})
    assert sorted(a[:2] for a in out["arguments"]) == [[1, "a0"], [1, "a1"], [2, "a0"],
                                                       [2, "a1"]]
    asked = dict((a, q) for a, q in model.seen if "Round 2" in q)
    assert asked["a0"] == ("Instructions: You are a0. Role 0.\n\n"
                           "Round 2. The others argued:\n- a1: a1@1\nAnswer them.")
    assert model.seen[-1][0] == "a2" and "- a0: a0@2" in model.seen[-1][1]
    assert out["messages"][-1].content == "a2@1" and out["round"] == 3


def test_pipeline_example_plans_executes_and_integrates() -> None:
    out, model = run_example("pipeline", 4)
    assert out["plan"] == "a0@1" and sorted(out["results"]) == [["a1", "a1@1"],
                                                                ["a2", "a2@1"]]
    assert model.seen[0][0] == "a0" and model.seen[-1][0] == "a3"
    assert "Instructions: You are a0. Role 0." in model.seen[0][1]  # role folded in
    assert "- a1: a1@1\n- a2: a2@1" in model.seen[-1][1]


def compiled() -> Any:
    g = StateGraph(dict)
    g.add_node("n", lambda s: {})
    g.add_edge(START, "n")
    return g.compile()


def not_a_graph() -> int:
    return 1


def test_factories_by_name() -> None:
    team = own_team("tests.agents.test_kit:compiled")
    assert "n" in team_graph(team).nodes  # a compiled graph is taken as it is
    with pytest.raises(GraphLoadError, match="No module named"):
        team_graph(own_team("tests.nowhere:graph"))
    with pytest.raises(GraphLoadError, match="not a StateGraph"):
        team_graph(own_team("tests.agents.test_kit:not_a_graph"))


@pytest.mark.parametrize("spec_file", ["review.yaml", "debate.yaml", "plan.yaml"])
def test_the_example_teams_run_their_shape_written_with_the_kit(spec_file: str) -> None:
    """On the threads API a built-in shape is its kit example: the spec's workflow names
    the roles (the reducer joins even when it is not the last agent; the planner plans),
    and a run without input works on the spec's task."""
    from pathlib import Path

    from granikv_agents import load_spec
    from granikv_agents.kit import roles

    spec = load_spec(Path(__file__).resolve().parents[2] / "deploy" / "teams" / spec_file)
    agents = [a.model_dump() for a in spec.agents]
    agents.append(agents.pop(0))  # the planner (or first worker) last: roles by name
    team = spec.model_copy(update={"agents": [type(spec.agents[0]).model_validate(a)
                                              for a in agents]}).to_team()
    r = roles(team, planner=team.planner is not None)
    assert r.joiner.name == team.shape.reducer and team.agents[-1] not in (r.joiner,)
    model, pins = Echo(), Pins()
    ctx = RunContext(pins, asyncio.Semaphore(4), team, model)  # type: ignore[arg-type]
    graph = team_graph(team)
    assert "register_context" in graph.nodes and "agent_turn" not in graph.nodes
    out = asyncio.run(graph.ainvoke({}, context=ctx))
    assert pins.pinned == [team.context]
    said = [agent for agent, _ in model.seen]
    rounds = team.limits.rounds if team.shape.shape == "debate" else 1
    assert sorted(said[:-1]) == sorted(
        [w.name for w in r.workers] * rounds + ([r.planner.name] if r.planner else []))
    assert said[-1] == r.joiner.name and out["messages"][-1].name == r.joiner.name
    first = model.seen[0][1]
    assert team.task in first  # no input: the spec's task
