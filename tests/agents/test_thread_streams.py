"""What a run streams, as LangGraph Server streams it, on both checkpointers (SQLite and
a real PostgreSQL server), read as the server-sent events' text (``ThreadApi.events``):
``stream_mode="messages"``'s ``messages/metadata``, ``messages/partial`` (a streamed
answer, added up) and ``messages/complete`` (a whole answer, a tool's message);
``messages-tuple``'s ``[chunk, metadata]`` pairs; and only the client's thread id in
every event, never the checkpoint thread's ``<team>/<id>``. LangGraph only: no Serve app
(test_langgraph_sdk.py streams through the platform with the SDK)."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

from langchain_core.messages import AIMessage

from granikv_agents.team import Team
from granikv_agents.threads.api import ThreadApi
from granikv_agents.threads.executor import ThreadExecutor
from tests.agents.threads_kit import context_with, own_team, script

TOOLS = own_team("granikv_agents.examples.tools:graph")
RULE_2 = "A prefix that does not fit HOT is refused, not evicted."


def assistants(team: str) -> dict[str, Team]:
    return {"tools": TOOLS} if team == "t" else {}


def streaming(*replies: str) -> Any:
    """A scripted model that streams its answers (one chunk a word or space)."""
    model = script(*replies)
    model.disable_streaming = False
    return model


async def opened(url: str, model: Any) -> AsyncIterator[ThreadApi]:
    async with ThreadExecutor.open(url, assistants, context_with(model)) as ex:
        yield ThreadApi(ex, lambda team: {"tools": "tools"}, ping_s=15.0)


async def streamed(api: ThreadApi, tid: str, text: str, modes: Any) -> str:
    """A run's server-sent events, as sent."""
    run = await api.ex.create_run("t", tid, {"assistant_id": "tools", "stream_mode": modes,
                                             "input": {"messages": [
                                                 {"role": "user", "content": text}]}})
    return "".join([item.text async for item in api.events("t", tid, run["run_id"])])


def parsed(sse: str) -> list[tuple[str, Any]]:
    """``(event, data)`` of each event (pings and ids left out)."""
    out = []
    for block in sse.strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines()
                      if not line.startswith(":"))
        out.append((fields["event"], json.loads(fields["data"])))
    return out


async def _messages_as_langgraph_server_sends_them(url: str) -> None:
    tid = str(uuid.uuid4())
    call = AIMessage("", tool_calls=[{"name": "review_rule", "args": {"number": 2},
                                      "id": "call-1"}])
    async for api in opened(url, script(call, "Rule 2 says: refuse.")):
        await api.ex.create_thread("t", tid)
        whole = parsed(await streamed(api, tid, "What is rule 2?", "messages"))
    # not streamed: each message whole, its metadata first
    assert [e for e, _ in whole] == ["metadata", *["messages/metadata",
                                                   "messages/complete"] * 3, "end"]
    for (_, meta), (_, done) in zip(whole[1:-1:2], whole[2:-1:2], strict=True):
        (mid, body), = meta.items()
        assert list(body) == ["metadata"] and body["metadata"]["thread_id"] == tid
        assert len(done) == 1 and done[0]["id"] == mid
    completes = [d[0] for e, d in whole if e == "messages/complete"]
    assert [m["type"] for m in completes] == ["ai", "tool", "ai"]
    assert completes[0]["tool_calls"][0]["name"] == "review_rule"
    assert [m["content"] for m in completes[1:]] == [RULE_2, "Rule 2 says: refuse."]
    assert [e[1][next(iter(e[1]))]["metadata"]["langgraph_node"]
            for e in whole if e[0] == "messages/metadata"] == ["agent", "tools", "agent"]

    async for api in opened(url, streaming("Two short words.", "Three more words.")):
        tokens = parsed(await streamed(api, tid, "Shorter?", "messages"))
        pairs = parsed(await streamed(api, tid, "Again?", "messages-tuple"))
    # streamed: the message so far after each token, as an "ai" message
    assert [e for e, _ in tokens[:2]] == ["metadata", "messages/metadata"]
    assert {e for e, _ in tokens[2:-1]} == {"messages/partial"} and tokens[-1][0] == "end"
    (mid, body), = tokens[1][1].items()
    assert body["metadata"]["langgraph_node"] == "agent"
    sofar = [d for e, d in tokens if e == "messages/partial"]
    assert all(len(d) == 1 and d[0]["id"] == mid and d[0]["type"] == "ai" for d in sofar)
    texts = [d[0]["content"] for d in sofar]
    assert texts == ["Two", "Two ", "Two short", "Two short ", "Two short words."]
    # messages-tuple: LangGraph's pairs as they are, under "messages"
    assert {e for e, _ in pairs[1:-1]} == {"messages"}
    chunks = [d for e, d in pairs if e == "messages"]
    assert all(c["type"] == "AIMessageChunk" and m["langgraph_node"] == "agent"
               for c, m in chunks)
    assert "".join(c["content"] for c, _ in chunks) == "Three more words."


def test_messages_as_langgraph_server_sends_them(store_url: str) -> None:
    asyncio.run(_messages_as_langgraph_server_sends_them(store_url))


async def _every_thread_id_streamed_is_the_clients(url: str) -> None:
    tid = str(uuid.uuid4())
    call = AIMessage("", tool_calls=[{"name": "word_count", "args": {"text": "a b"},
                                      "id": "call-1"}])
    async for api in opened(url, script(call, "Two.")):
        await api.ex.create_thread("t", tid)
        tool_turn = await streamed(api, tid, "Count.", ["messages", "events", "debug"])
    async for api in opened(url, streaming("One two.", "Three.")):
        token_turn = await streamed(api, tid, "Again.", ["messages", "events", "debug"])
        pairs = await streamed(api, tid, "Once more.", ["messages-tuple", "updates"])
    for sse in (tool_turn, token_turn, pairs):
        assert f"t/{tid}" not in sse  # the checkpoint thread's id
        events = parsed(sse)
        assert {"messages/metadata", "messages"} & {e for e, _ in events}
        metadata = [body["metadata"] for e, d in events if e == "messages/metadata"
                    for body in d.values()] + [m for e, d in events if e == "messages"
                                               for _, m in [d]]
        assert metadata and all(m["thread_id"] == tid for m in metadata)
    debug = [d for e, d in parsed(tool_turn) if e == "debug" and d["type"] == "checkpoint"]
    configs = [d["payload"][k] for d in debug for k in ("config", "parent_config")
               if d["payload"].get(k)]
    assert configs and all(c["configurable"]["thread_id"] == tid for c in configs)
    runs = [d for e, d in parsed(token_turn) if e == "events"
            and d["event"] == "on_chat_model_start"]
    assert runs and all(d["metadata"]["thread_id"] == tid for d in runs)


def test_every_thread_id_streamed_is_the_clients(store_url: str) -> None:
    asyncio.run(_every_thread_id_streamed_is_the_clients(store_url))
