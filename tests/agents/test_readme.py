"""agents/README.md's Python examples run as written: the graph of one's own (on a
scripted model), and, against the suite's Serve app, the ``langgraph-sdk`` script and
the YAML-run script, each with a team's API key, as a user runs them after ``make run``
(only the address differs: the suite's app listens on another port)."""

from __future__ import annotations

import asyncio
import re
import sys
from pathlib import Path

import pytest
from langchain_core.messages import HumanMessage

from granikv_agents.graph import RunContext
from granikv_agents.graphs import team_graph
from granikv_agents.spec import TeamSpec
from tests.agents.test_kit import Pins
from tests.agents.threads_kit import Echo
from tests.conftest import API_KEYS

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "agents" / "README.md"
MAKE_RUN_URL = "http://localhost:8000"


def snippets() -> dict[str, str]:
    """The README's Python blocks, by the file name their first comment gives."""
    out = {}
    for block in re.findall(r"```python\n(.*?)```", README.read_text(), re.S):
        first = block.splitlines()[0]
        if m := re.match(r"# ([\w/]+\.py)", first):
            out[m.group(1)] = block
    return out


def run_script(code: str, argv: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", ["script.py", *argv])
    exec(compile(code, "<README>", "exec"), {"__name__": "__main__"})


def test_the_readme_names_its_scripts() -> None:
    assert {"my_team/graph.py", "sdk_chat.py", "review_run.py"} <= set(snippets())


def test_a_graph_of_ones_own_as_written(tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "my_team").mkdir()
    (tmp_path / "my_team" / "graph.py").write_text(snippets()["my_team/graph.py"])
    monkeypatch.syspath_prepend(str(tmp_path))
    team = TeamSpec.model_validate({
        "team": "red", "context": "The change.", "graph": "my_team.graph:graph",
        "agents": [{"name": "assistant", "role": "Answer in one sentence."}]}).to_team()
    model, pins = Echo(), Pins()
    ctx = RunContext(pins, asyncio.Semaphore(1), team, model)  # type: ignore[arg-type]
    out = asyncio.run(team_graph(team).ainvoke(
        {"messages": [HumanMessage("What changed?")]}, context=ctx))
    assert pins.pinned == ["The change."] and out["context"]["prefix_id"] == "p1"
    assert [m.type for m in out["messages"]] == ["human", "ai"]
    assert out["messages"][-1].content == "assistant@1"
    assert "You are assistant. Answer in one sentence." in model.seen[0][1]


@pytest.mark.ray
@pytest.mark.vllm
def test_the_sdk_script_as_written(base_url: str, monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    code = snippets()["sdk_chat.py"]
    assert MAKE_RUN_URL in code
    run_script(code.replace(MAKE_RUN_URL, base_url), [API_KEYS["red"]], monkeypatch)
    out = capsys.readouterr().out.splitlines()
    assert {"chat", "review"} <= set(eval(out[0]))  # the assistants list, printed
    assert any(line.startswith("messages") for line in out), out
    assert "['human', 'ai', 'human', 'ai']" in out, out


@pytest.mark.ray
@pytest.mark.vllm
def test_the_yaml_run_script_as_written(base_url: str, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    code = snippets()["review_run.py"]
    assert MAKE_RUN_URL in code
    (tmp_path / "deploy").symlink_to(ROOT / "deploy")  # run "from the repository root"
    monkeypatch.chdir(tmp_path)  # its runs.sqlite lands here
    run_script(code.replace(MAKE_RUN_URL, base_url), [API_KEYS["red"]], monkeypatch)
    status, turns = capsys.readouterr().out.split()[:2]
    assert (status, turns) == ("succeeded", "9")
    assert (tmp_path / "runs.sqlite").exists()
