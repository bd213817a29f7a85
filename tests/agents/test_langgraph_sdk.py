"""The official ``langgraph-sdk`` client drives teams on the platform (the suite's Serve
app, the tiny model through the run service's Serve handle): assistants, a
client-chosen thread, a run streamed with ``stream_mode="messages"``, a second run that
continues the thread, cancel, join, ``Last-Event-ID`` resume, and a human approval that
``interrupt()`` waits for."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from langgraph_sdk import get_client
from langgraph_sdk.errors import PermissionDeniedError

from tests.agents.helpers import delta, settled
from tests.conftest import API_KEYS

pytestmark = [pytest.mark.ray, pytest.mark.vllm]


def sdk(base_url: str, team: str) -> Any:
    return get_client(url=f"{base_url}/teams/{team}", api_key=API_KEYS[team])


def ask(text: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}]}


async def conversation(base_url: str) -> dict[str, Any]:
    red, gold = sdk(base_url, "red"), sdk(base_url, "gold")
    out: dict[str, Any] = {"assistants": [a["assistant_id"]
                                          for a in await red.assistants.search()]}
    tid = f"chat-{uuid.uuid4().hex[:8]}"
    out["thread"] = (await red.threads.create(thread_id=tid))["thread_id"]
    out["parts"] = [p async for p in red.runs.stream(tid, "chat", input=ask("What changed?"),
                                                     stream_mode="messages")]
    out["second"] = await red.runs.wait(tid, "chat", input=ask("Is it tested?"))
    doomed = await red.runs.create(tid, "chat", input=ask("Never mind."))
    await red.runs.cancel(tid, doomed["run_id"], wait=True)
    out["cancelled"] = await red.runs.get(tid, doomed["run_id"])
    joined = await red.runs.create(tid, "chat", input=ask("Thanks."))
    out["joined"] = await red.runs.join(tid, joined["run_id"])
    first = out["parts"][0].data["run_id"]
    out["replay"] = [p async for p in red.runs.join_stream(tid, first, last_event_id="1")]
    out["runs"] = await red.runs.list(tid, limit=10)
    with pytest.raises(PermissionDeniedError):
        await gold.threads.get(tid)
    return out


def test_sdk_streams_continues_cancels_and_joins_a_thread(base_url: str) -> None:
    before = settled(base_url)
    out = asyncio.run(conversation(base_url))
    assert out["assistants"] == ["chat", "review"]  # red's spec files
    parts = out["parts"]
    assert parts[0].event == "metadata" and out["thread"].startswith("chat-")
    assert parts[-1].event == "end" and [p.event for p in parts].count("end") == 1
    tokens = [p.data for p in parts if p.event == "messages"]
    assert tokens and all(m["type"] in ("AIMessageChunk", "ai") for m, _ in tokens)
    assert {meta["langgraph_node"] for _, meta in tokens} == {"answer"}
    msgs = out["second"]["messages"]
    assert [m["type"] for m in msgs] == ["human", "ai", "human", "ai"]  # continued
    assert msgs[1]["usage_metadata"]["output_tokens"] > 0
    assert out["cancelled"]["status"] == "interrupted"
    assert [m["content"] for m in out["joined"]["messages"] if m["type"] == "human"][-1] == (
        "Thanks.")
    assert [p.event for p in out["replay"]] == [p.event for p in parts[1:]]  # after id 1
    assert [r["status"] for r in out["runs"]] == ["success", "interrupted", "success",
                                                  "success"]
    d = delta(settled(base_url), before)
    pin = out["second"]["context"]["prefix_id"]
    assert d.get(f"prefix:{pin}", 0) >= 3, d  # each answer hit the team's HOT prefix
    assert "bind_errors" not in d, d


async def approval(base_url: str) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    blue = sdk(base_url, "blue")
    tid = (await blue.threads.create())["thread_id"]  # a generated id
    await blue.runs.wait(tid, "approve", input=ask("The release is out."))
    paused = await blue.threads.get_state(tid)
    thread = await blue.threads.get(tid)
    done = await blue.runs.wait(tid, "approve", command={"resume": "yes"})
    return paused, thread, done


def test_sdk_resumes_an_interrupted_run_with_a_command(base_url: str) -> None:
    paused, thread, done = asyncio.run(approval(base_url))
    assert paused["next"] == ["review"] and thread["status"] == "interrupted"
    assert "draft" in paused["interrupts"][0]["value"]
    assert done["approved"] is True and len(done["messages"]) == 2
