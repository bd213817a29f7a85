"""The debate and pipeline teams through ChatOpenAI (the HTTP binding, outside the
cluster), and the same team through REST (the Serve-handle binding, inside it): both
send the engine the same prompts, bound to the same HOT prefix."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from granikv_agents import RunExecutor, load_spec
from tests.agents.helpers import delta, http_backend, same_pin, settled, wait_run

pytestmark = [pytest.mark.ray, pytest.mark.vllm]
Client = Callable[[str | None], httpx.Client]
TEAMS = Path(__file__).resolve().parents[2] / "deploy" / "teams"


def run_over_http(base_url: str, db: Path, name: str) -> dict[str, Any]:
    spec = load_spec(TEAMS / f"{name}.yaml")

    async def go() -> dict[str, Any]:
        async with RunExecutor.open(str(db), lambda t: http_backend(base_url, t.name)) as ex:
            rec = await ex.start(spec)
            assert (await ex.wait(rec.run_id, 300)).status == "succeeded"
            return await ex.view(rec.run_id)

    return asyncio.run(go())


def shape(view: dict[str, Any]) -> list[tuple[str, int, str]]:
    return [(t["agent"], t["round"], t["kind"]) for t in view["turns"]]


def test_debate_over_chatopenai(base_url: str, tmp_path: Path) -> None:
    before = settled(base_url)
    view = run_over_http(base_url, tmp_path / "runs.sqlite", "debate")
    debaters = ["proposer", "opposer", "skeptic"]
    assert shape(view) == [*((d, 1, "work") for d in debaters),
                           *((d, 2, "work") for d in debaters), ("judge", 2, "reduce")]
    r1 = {t["agent"]: t["prompt_tokens"] for t in view["turns"] if t["round"] == 1}
    r2 = {t["agent"]: t["prompt_tokens"] for t in view["turns"] if t["kind"] == "work"
          and t["round"] == 2}
    assert all(r2[d] > r1[d] for d in debaters)  # round 2 carries the history
    d = delta(settled(base_url), before)
    assert d["hits"] == d[f"prefix:{view['context']['prefix_id']}"] == 7, d
    assert "bind_errors" not in d, d


def test_pipeline_prompts_match_across_bindings(client: Client, base_url: str,
                                                tmp_path: Path) -> None:
    before = settled(base_url)
    over_http = run_over_http(base_url, tmp_path / "runs.sqlite", "plan")
    blue = client("blue")
    over_rest = wait_run(blue, "blue", blue.post("/teams/blue/runs",
                                                 json={"spec_name": "plan"}).json()["run_id"])
    assert over_rest["status"] == "succeeded"
    want = [("planner", 1, "plan"), ("builder", 1, "work"), ("tester", 1, "work"),
            ("deployer", 1, "work"), ("integrator", 1, "reduce")]
    assert shape(over_http) == shape(over_rest) == want
    # blue's configured context is the spec's: both runs reuse the platform's pin.
    assert same_pin(over_http["context"], over_rest["context"])
    assert over_rest["context"]["reused"] and over_rest["context"]["state"] == "ready"
    # The planner's prompt is the same whatever the binding; the executors' prompts
    # differ only by the plan text each run's planner wrote.
    assert over_http["turns"][0]["prompt_tokens"] == over_rest["turns"][0]["prompt_tokens"]
    d = delta(settled(base_url), before)
    assert d["hits"] == d[f"prefix:{over_rest['context']['prefix_id']}"] == 10, d
    assert "bind_errors" not in d, d


def test_team_model_tool_calls_through_the_platform(base_url: str) -> None:
    """TeamChatModel.bind_tools over the HTTP binding, on the tiny model: the call the
    model writes (forced by a structured-output choice: its weights are random) comes
    back parsed by vLLM's hermes parser, the tool's result goes back with its call id,
    and both turns read the team's context from HOT."""
    import json as json_

    from langchain_core.messages import HumanMessage, ToolMessage

    from granikv_agents.chat_model import TeamChatModel
    from granikv_agents.examples.tools import review_rule

    call = '<tool_call>{"name": "review_rule", "arguments": {"number": 2}}</tool_call>'
    context = "Green's review rules apply to every change. " * 8

    async def go() -> tuple[Any, Any]:
        backend = http_backend(base_url, "green")
        try:
            model = TeamChatModel(backend=backend, context=context, max_tokens=64)
            asked = [HumanMessage("What is rule 2?")]
            first = await model.bind_tools([review_rule]).ainvoke(
                asked, extra_body={"structured_outputs": {"choice": [call]}})
            assert first.tool_calls, (first.content, first.response_metadata)
            result = ToolMessage(str(review_rule.invoke(first.tool_calls[0]["args"])),
                                 tool_call_id=first.tool_calls[0]["id"])
            second = await model.bind_tools([review_rule]).ainvoke(
                [*asked, first, result], max_tokens=4)
            return first, second
        finally:
            await backend.aclose()

    before = settled(base_url)
    first, second = asyncio.run(go())
    assert [(c["name"], c["args"]) for c in first.tool_calls] == [("review_rule", {"number": 2})]
    assert first.tool_calls[0]["id"]
    assert second.usage_metadata["input_tokens"] > first.usage_metadata["input_tokens"]
    d = delta(settled(base_url), before)
    assert d["hits"] == 2 and "bind_errors" not in d, d
    assert json_.dumps(d)


def test_the_tools_example_graph_runs_on_the_tiny_model(base_url: str) -> None:
    """The tools example (``ToolNode`` + ``tools_condition``) end to end through the
    platform: the model's first turn is a scripted tool call (a structured-output choice:
    the tiny model's weights are random), vLLM's hermes parser returns it as a tool
    call, the tool runs, its result goes back, and the model's second turn ends the
    loop. Both model turns read the team's context from HOT."""
    from langchain_core.messages import HumanMessage

    from granikv_agents.chat_model import TeamChatModel
    from granikv_agents.graph import RunContext
    from granikv_agents.graphs import team_graph
    from tests.agents.threads_kit import own_team

    call = '<tool_call>{"name": "review_rule", "arguments": {"number": 2}}</tool_call>'

    class FirstTurnScripted(TeamChatModel):
        turns: int = 0

        def _request(self, messages: Any, kwargs: dict[str, Any]) -> Any:
            if self.turns == 0:
                kwargs = {**kwargs, "extra_body": {"structured_outputs": {"choice": [call]}}}
            self.turns += 1
            return super()._request(messages, kwargs)

    team = own_team("granikv_agents.examples.tools:graph", team="green")

    async def go() -> dict[str, Any]:
        backend = http_backend(base_url, "green")
        try:
            model = FirstTurnScripted(backend=backend, context="Green's tool rules. " * 6,
                                      max_tokens=64)
            ctx = RunContext.of(team, backend, model)
            out: dict[str, Any] = await team_graph(team).ainvoke(
                {"messages": [HumanMessage("What is review rule 2?")]}, context=ctx)
            return out
        finally:
            await backend.aclose()

    before = settled(base_url)
    out = asyncio.run(go())
    kinds = [m.type for m in out["messages"]]
    assert kinds == ["human", "ai", "tool", "ai"], out["messages"]
    asked = out["messages"][1].tool_calls
    assert [(c["name"], c["args"]) for c in asked] == [("review_rule", {"number": 2})]
    assert out["messages"][2].content == "A prefix that does not fit HOT is refused, not evicted."
    assert out["messages"][2].tool_call_id == asked[0]["id"]
    d = delta(settled(base_url), before)
    assert d["hits"] == 2 and "bind_errors" not in d, d


def test_both_bindings_stream_the_same_tokens(base_url: str) -> None:
    """TeamChatModel.astream through the HTTP binding and through the Serve handle (the
    in-cluster binding, as the run executor uses it): the reply arrives in pieces, the
    same greedy text both ways, with its token counts, and each turn is a HOT hit."""
    from ray import serve

    from granikv_agents.chat_model import TeamChatModel
    from granikv_agents.serve_binding import ServeTeamBackend
    from tests.conftest import APP

    context = "Streaming check of the green team. " * 6

    async def chunks(backend: Any) -> list[Any]:
        try:
            model = TeamChatModel(backend=backend, context=context, max_tokens=12)
            return [c async for c in model.astream("Say something.",
                                                   extra_body={"ignore_eos": True})]
        finally:
            await backend.aclose()

    handle = serve.get_deployment_handle(f"{APP}-llm", app_name=APP)
    before = settled(base_url)
    over_http = asyncio.run(chunks(http_backend(base_url, "green")))
    in_cluster = asyncio.run(chunks(ServeTeamBackend(handle, "green", "tiny-llama")))
    for got in (over_http, in_cluster):
        texts = [c.content for c in got if c.content]
        assert len(texts) >= 2, got  # streamed, not one piece
        total = got[0]
        for c in got[1:]:
            total = total + c
        assert total.usage_metadata["output_tokens"] == 12, total
    assert "".join(c.content for c in over_http) == "".join(c.content for c in in_cluster)
    d = delta(settled(base_url), before)
    assert d["hits"] == 2 and "bind_errors" not in d, d
