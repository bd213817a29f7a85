"""TeamChatModel with tools, over a recording backend (no platform): ``bind_tools`` sends
OpenAI tools, the backend's tool calls come back as ``AIMessage.tool_calls``, and the
next turn carries the assistant's call and the tool's result with its call id; the
tools example graph (ToolNode / tools_condition) runs end to end on it."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from langchain_core.messages import HumanMessage

from granikv_agents.binding import Delta, Reply, TurnRequest, sse_deltas
from granikv_agents.chat_model import TeamChatModel
from granikv_agents.examples.tools import graph
from granikv_agents.graph import RunContext
from granikv_agents.state import ContextPin
from tests.agents.threads_kit import own_team

CALL = {"id": "call-1", "type": "function",
        "function": {"name": "review_rule", "arguments": json.dumps({"number": 2})}}


class Recording:
    team = "t"

    def __init__(self, *replies: Reply) -> None:
        self.replies = list(replies)
        self.requests: list[TurnRequest] = []

    async def pin_context(self, text: str) -> ContextPin:
        return ContextPin(prefix_id="t-context", length=9, state="ready", pinned=True,
                          hot_start=0, reused=False)

    async def read_context(self) -> ContextPin | None:
        return None

    async def chat(self, request: TurnRequest, context: ContextPin) -> Reply:
        self.requests.append(request)
        return self.replies.pop(0)

    async def aclose(self) -> None:
        return None


def test_the_tools_example_runs_on_the_team_model() -> None:
    backend = Recording(Reply("", 10, 3, (CALL,)), Reply("Rule 2 says: refuse.", 20, 5))
    model = TeamChatModel(backend=backend, context="The shared context.")
    ctx = RunContext(backend, asyncio.Semaphore(2), own_team("x:y"), model)  # type: ignore[arg-type]
    out = asyncio.run(graph().compile().ainvoke(
        {"messages": [HumanMessage("What is rule 2?")]}, context=ctx))
    texts = [m.content for m in out["messages"]]
    assert texts[2] == "A prefix that does not fit HOT is refused, not evicted."
    assert texts[3] == "Rule 2 says: refuse." and len(texts) == 4
    assert out["messages"][1].tool_calls == [
        {"name": "review_rule", "args": {"number": 2}, "id": "call-1", "type": "tool_call"}]

    first, second = backend.requests
    assert sorted(t["function"]["name"] for t in first.tools) == ["review_rule", "word_count"]
    assert first.dicts() == [{"role": "user", "content": "What is rule 2?"}]
    body = first.body("m")
    assert body["tools"] == list(first.tools) and "tool_choice" not in body
    assistant, result = second.dicts()[1:]
    assert assistant["role"] == "assistant"
    assert [(c["id"], c["function"]["name"], json.loads(c["function"]["arguments"]))
            for c in assistant["tool_calls"]] == [("call-1", "review_rule", {"number": 2})]
    assert {k: result[k] for k in ("role", "tool_call_id", "content")} == {
        "role": "tool", "tool_call_id": "call-1",
        "content": "A prefix that does not fit HOT is refused, not evicted."}


def test_tool_choice_and_extra_body_reach_the_request() -> None:
    backend = Recording(Reply("plain", 1, 1))
    model = TeamChatModel(backend=backend, context="c").bind_tools(
        [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
        tool_choice="f", extra_body={"structured_outputs": {"choice": ["x"]}})
    msg: Any = asyncio.run(model.ainvoke("hi"))
    assert msg.content == "plain" and msg.tool_calls == []
    (req,) = backend.requests
    body = req.body("m")
    assert body["tool_choice"] == {"type": "function", "function": {"name": "f"}}
    assert body["structured_outputs"] == {"choice": ["x"]} and body["model"] == "m"
    # without tools, a turn is the plain (role, content) one
    plain = Recording(Reply("ok", 1, 1))
    asyncio.run(TeamChatModel(backend=plain, context="c").ainvoke("hi"))
    assert plain.requests[0].chat == () and plain.requests[0].tools == ()


class Streaming(Recording):
    """Streams its replies' text in two pieces, the token counts last."""

    def __init__(self, *texts: str) -> None:
        super().__init__(*(Reply(t, 10, 2) for t in texts))

    async def stream(self, request: TurnRequest, context: ContextPin) -> Any:
        reply = (await self.chat(request, context)).text
        half = len(reply) // 2
        for piece in (reply[:half], reply[half:]):
            yield Delta(piece)
        yield Delta("", (10, 2))


def test_the_team_model_streams_tokens_into_langgraph_messages_mode() -> None:
    from langgraph.graph import START, MessagesState, StateGraph

    backend = Streaming("Hello there")
    model = TeamChatModel(backend=backend, context="c")

    async def node(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    g = StateGraph(MessagesState)
    g.add_node("agent", node)
    g.add_edge(START, "agent")

    async def run() -> list[str]:
        return [chunk.content async for chunk, _ in g.compile().astream(
            {"messages": [HumanMessage("hi")]}, stream_mode="messages")]

    assert [t for t in asyncio.run(run()) if t] == ["Hello", " there"]  # token by token
    chunks = asyncio.run(_collect(TeamChatModel(backend=Streaming("abcd"), context="c")))
    assert "".join(c.content for c in chunks) == "abcd"
    total = chunks[0]
    for c in chunks[1:]:
        total = total + c
    assert total.content == "abcd" and total.usage_metadata == {
        "input_tokens": 10, "output_tokens": 2, "total_tokens": 12}


async def _collect(model: TeamChatModel) -> list[Any]:
    return [c async for c in model.astream("hi")]


def test_sse_deltas_reads_text_usage_and_errors() -> None:
    import pytest

    from granikv_agents.binding import LLMCallError, TransientLLMError

    lines = ['data: {"choices": [{"delta": {"role": "assistant", "content": ""}}]}',
             'data: {"choices": [{"delta": {"content": "Hi"}}]}', "",
             'data: {"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 1}}',
             "data: [DONE]"]
    assert sse_deltas(lines) == [Delta("Hi"), Delta("", (7, 1))]
    with pytest.raises(TransientLLMError):
        sse_deltas(['data: {"error": {"message": "boom", "code": 500}}'])
    with pytest.raises(LLMCallError, match="400: bad"):
        sse_deltas(['data: {"error": {"message": "bad", "code": 400}}'])
