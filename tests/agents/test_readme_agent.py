"""agents/README.md's ``create_agent`` snippet (``my_team/agent.py``) runs as written:
the agent calls a tool through the run's team model (a scripted one) and answers."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from granikv_agents.graph import RunContext
from granikv_agents.graphs import team_graph
from tests.agents.test_readme import snippets
from tests.agents.threads_kit import NoPlatform, own_team, script


def test_the_create_agent_snippet_as_written(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "my_team").mkdir()
    (tmp_path / "my_team" / "agent.py").write_text(snippets()["my_team/agent.py"])
    monkeypatch.syspath_prepend(str(tmp_path))
    team = own_team("my_team.agent:graph")
    call = AIMessage("", tool_calls=[{"name": "word_count", "args": {"text": "a b c d"},
                                      "id": "call-1"}])
    model = script(call, "Four words.")
    ctx = RunContext(NoPlatform(), asyncio.Semaphore(1), team, model)  # type: ignore[arg-type]
    out = asyncio.run(team_graph(team).ainvoke(
        {"messages": [HumanMessage("How many words: a b c d?")]}, context=ctx))
    assert [m.type for m in out["messages"]] == ["human", "ai", "tool", "ai"]
    assert out["messages"][2].content == "4" and out["messages"][-1].content == "Four words."
    assert model.bound == ["review_rule", "word_count"]
