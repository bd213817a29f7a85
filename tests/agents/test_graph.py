"""Graph construction (nodes, edges, retry policies), the turns' own messages, the state
reducer and the run events, on the example teams (pure: no engine, nothing runs)."""

from __future__ import annotations

from pathlib import Path

import pytest
from langgraph.types import RetryPolicy

from granikv_agents.binding import LLMCallError, TransientLLMError, is_transient, status_error
from granikv_agents.events import unreported_events, update_events
from granikv_agents.graph import RetryConfig, build_graph
from granikv_agents.prompts import plan_turn, reduce_turn, work_turns
from granikv_agents.spec_file import find_spec
from granikv_agents.state import Turn, add_turns
from granikv_agents.team import Team

TEAMS = Path(__file__).resolve().parents[2] / "deploy" / "teams"


def team(name: str) -> Team:
    return find_spec(TEAMS, name).to_team()


def turn(agent: str, index: int, round_: int, kind: str = "work",
         text: str | None = None) -> Turn:
    return Turn(agent=agent, index=index, round=round_, kind=kind,  # type: ignore[typeddict-item]
                text=f"{agent}@{round_}" if text is None else text, prompt_tokens=0,
                completion_tokens=0)


def edges(t: Team) -> set[tuple[str, str, bool]]:
    g = build_graph(t).compile().get_graph()
    return {(e.source, e.target, e.conditional) for e in g.edges}


def test_map_reduce_and_debate_graphs() -> None:
    want = {("__start__", "register_context", False),
            ("register_context", "agent_turn", True), ("agent_turn", "join", False),
            ("join", "agent_turn", True), ("join", "reduce", True),
            ("reduce", "finish", False), ("finish", "__end__", False)}
    assert edges(team("review")) == want
    assert edges(team("debate")) == want  # the rounds loop through join
    nodes = set(build_graph(team("review")).nodes)
    assert nodes == {"register_context", "agent_turn", "join", "reduce", "finish"}


def test_pipeline_graph_plans_each_round() -> None:
    assert edges(team("plan")) == {
        ("__start__", "register_context", False), ("register_context", "plan", False),
        ("plan", "agent_turn", True), ("agent_turn", "join", False),
        ("join", "plan", True), ("join", "reduce", True), ("join", "agent_turn", True),
        ("reduce", "finish", False), ("finish", "__end__", False)}


def test_llm_nodes_retry_transient_errors_only() -> None:
    g = build_graph(team("plan"), RetryConfig(max_attempts=4, initial_interval_s=0.1))
    for name in ("register_context", "plan", "agent_turn", "reduce", "finish"):
        policy = g.nodes[name].retry_policy
        assert isinstance(policy, RetryPolicy)
        assert policy.max_attempts == 4 and policy.initial_interval == 0.1
        assert policy.retry_on is is_transient
    assert g.nodes["join"].retry_policy is None
    assert is_transient(status_error(503, "restarting"))
    assert is_transient(status_error(429, "busy")) and is_transient(TransientLLMError(0, "x"))
    for status in (400, 403, 404, 409, 422):
        err = status_error(status, "no")
        assert type(err) is LLMCallError and not is_transient(err)


def test_map_reduce_fan_out_is_one_turn_per_reviewer() -> None:
    t = team("review")
    sends = work_turns(t, [], 1)
    assert [s["agent"] for s in sends] == ["isolation", "capacity", "errors", "metrics",
                                           "restarts", "latency", "docs", "tests"]
    first = sends[0]
    assert first["kind"] == "work" and first["round"] == 1
    # Only the agent's own messages: the platform puts the shared context first.
    assert first["messages"] == [
        ["system", "You are isolation. Apply review rule 1: can a team reach another "
                   "team's prefix?"],
        ["user", t.task]]
    assert all(t.context not in m[1] for s in sends for m in s["messages"])
    done = [turn(a.name, a.index, 1) for a in t.workers]
    red = reduce_turn(t, done)
    assert red["agent"] == "synthesizer" and red["kind"] == "reduce"
    assert red["messages"][1][1].splitlines()[2:4] == ["Round 1:", "- isolation: isolation@1"]
    assert "Join these findings into one report." in red["messages"][1][1]


def test_debate_round_two_shows_the_others_last_arguments() -> None:
    t = team("debate")
    r1 = [turn("proposer", 0, 1, text="Yes."), turn("opposer", 1, 1, text="No."),
          turn("skeptic", 2, 1, text="")]
    sends = work_turns(t, r1, 2)
    assert [s["agent"] for s in sends] == ["proposer", "opposer", "skeptic"]
    assert sends[0]["messages"][1:] == [
        ["user", t.task], ["assistant", "Yes."],
        ["user", "Round 2. The others argued:\n- opposer: No.\n- skeptic: (no answer)\n"
                 "Answer them."]]
    judge = reduce_turn(t, [*r1, *(turn(s["agent"], i, 2) for i, s in enumerate(sends))])
    assert "- proposer: proposer@2" in judge["messages"][1][1]
    assert "- proposer: Yes." not in judge["messages"][1][1]  # the last round only


def test_pipeline_executors_see_the_plan() -> None:
    t = team("plan")
    p = plan_turn(t, [], 1)
    assert p["agent"] == "planner" and p["kind"] == "plan"
    assert p["messages"][1][1].endswith("one step for each executor: builder, tester, deployer.")
    plan = turn("planner", 0, 1, "plan", "1. build 2. test 3. deploy")
    sends = work_turns(t, [plan], 1)
    assert [s["agent"] for s in sends] == ["builder", "tester", "deployer"]
    assert sends[1]["messages"][1] == [
        "user", f"{t.task}\n\nThe plan:\n1. build 2. test 3. deploy\n\nDo your step."]
    result = reduce_turn(t, [plan, *(turn(s["agent"], i + 1, 1) for i, s in enumerate(sends))])
    assert "The plan:\n1. build 2. test 3. deploy" in result["messages"][1][1]


def test_parallel_turns_merge_in_spec_order() -> None:
    a, b, c = turn("a", 0, 1), turn("b", 1, 1), turn("c", 2, 1)
    z = turn("z", 3, 1, "reduce")
    assert add_turns([c], [z, a]) == [a, c, z]
    assert add_turns(add_turns([], [b]), [a]) == [a, b]
    assert add_turns(None, None) == []


@pytest.mark.parametrize(("chunk", "events"), [
    ({"register_context": {"context": {"prefix_id": "p"}, "round": 1}},
     [("context", {"when": "start", "prefix_id": "p"})]),
    ({"agent_turn": {"turns": [{"agent": "a"}]}}, [("turn", {"agent": "a"})]),
    ({"agent_turn": {"turns": [{"agent": "a"}]}, "__metadata__": {"cached": True}}, []),
    ({"join": {"round": 3}}, [("round", {"done": 2})]),
    ({"reduce": {"turns": [{"agent": "z"}], "result": "r"}}, [("turn", {"agent": "z"})]),
    ({"finish": {"context_after": {"prefix_id": "p"}}},
     [("context", {"when": "end", "prefix_id": "p"})]),
])
def test_update_events(chunk: dict[str, object], events: list[object]) -> None:
    assert list(update_events(chunk)) == events


def test_unreported_events_are_what_the_checkpoint_holds_and_the_log_lacks() -> None:
    a1, b1, a2, b2 = turn("a", 0, 1), turn("b", 1, 1), turn("a", 0, 2), turn("b", 1, 2)
    values = {"context": {"prefix_id": "p"}, "round": 2, "turns": [a1, b1, a2, b2]}
    logged = [{"type": "status", "status": "running"},
              {"type": "context", "when": "start", "prefix_id": "p"},
              {"type": "turn", **a1}, {"type": "turn", **a2}]
    # b1 and the close of round 1 never reached the log; b2 (round 2, still open) neither.
    assert unreported_events(values, logged) == [
        ("turn", {**b1, "recovered": True}), ("round", {"done": 1, "recovered": True}),
        ("turn", {**b2, "recovered": True})]
    everything = logged + [{"type": "turn", **b1}, {"type": "round", "done": 1},
                           {"type": "turn", **b2}]
    assert unreported_events(values, everything) == []
    # Died after register_context was saved, before its event; and at the very end.
    assert unreported_events({"context": {"prefix_id": "p"}, "round": 1}, []) == [
        ("context", {"when": "start", "prefix_id": "p", "recovered": True})]
    done = {**values, "round": 3, "context_after": {"prefix_id": "p"}}
    assert unreported_events(done, everything) == [
        ("round", {"done": 2, "recovered": True}),
        ("context", {"when": "end", "prefix_id": "p", "recovered": True})]
    assert unreported_events({}, []) == []
