"""The ``create_agent`` example (LangChain's agent, which replaces ``create_react_agent``)
as a threads API assistant, on both checkpointers, with a scripted tool-calling model:
the run's team model answers, the tools run, the thread continues; no deprecation
warning. LangGraph only: no Serve app."""

from __future__ import annotations

import asyncio
import uuid
import warnings
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from granikv_agents.examples import agent
from granikv_agents.graphs import team_graph
from granikv_agents.team import Team
from granikv_agents.threads.executor import ThreadExecutor
from tests.agents.threads_kit import context_with, own_team, script

AGENT = own_team("granikv_agents.examples.agent:graph")


def assistants(team: str) -> dict[str, Team]:
    return {"agent": AGENT} if team == "t" else {}


async def _agent_calls_a_tool_and_the_thread_continues(url: str) -> None:
    call = AIMessage("", tool_calls=[{"name": "review_rule", "args": {"number": 3},
                                      "id": "call-1"}])
    model = script(call, "Rule 3: every error says what to do next.", "Yes.")
    tid = f"th-{uuid.uuid4().hex[:8]}"
    async with ThreadExecutor.open(url, assistants, context_with(model)) as ex:
        await ex.create_thread("t", tid)
        run = await ex.create_run("t", tid, {"assistant_id": "agent", "input": {
            "messages": [{"role": "user", "content": "What is rule 3?"}]}})
        values = await ex.join("t", tid, run["run_id"])
        assert (await ex.run("t", tid, run["run_id"])).status == "success"
        assert [m["type"] for m in values["messages"]] == ["human", "ai", "tool", "ai"]
        assert values["messages"][2]["content"] == "Every error says what to do next."
        assert model.bound == ["review_rule", "word_count"]  # bound on the team model
        again = await ex.create_run("t", tid, {"assistant_id": "agent", "input": {
            "messages": [{"role": "user", "content": "Sure?"}]}})
        values = await ex.join("t", tid, again["run_id"])
        assert [m["content"] for m in values["messages"][-2:]] == ["Sure?", "Yes."]


def test_agent_calls_a_tool_and_the_thread_continues(store_url: str) -> None:
    asyncio.run(_agent_calls_a_tool_and_the_thread_continues(store_url))


def test_agent_builds_without_deprecation_warnings() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        built: Any = team_graph(AGENT)
    assert {"model", "tools"} <= set(built.nodes)


def test_the_model_slot_refuses_to_answer_on_its_own() -> None:
    with pytest.raises(RuntimeError, match="team_model middleware"):
        agent.RunModel().invoke([HumanMessage("hi")])
