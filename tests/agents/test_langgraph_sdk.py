"""The official ``langgraph-sdk`` client drives teams on the platform (the suite's Serve
app, the tiny model through the run service's Serve handle): assistants, a
client-chosen thread, a run streamed with ``stream_mode="messages-tuple"`` and one with
``"messages"`` (LangGraph Server's events for each), a second run that
continues the thread, cancel, join, ``Last-Event-ID`` resume, a human approval that
``interrupt()`` waits for; the rest of the surface (history, state updates, copy,
metadata, delete, graphs and schemas, the ``events`` and ``debug`` stream modes,
``interrupt_before``, ``enqueue``), what is refused (422, naming it), and thread ids
scoped by team on every thread route (another team's thread is 404, as an absent one)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from langgraph_sdk import get_client
from langgraph_sdk.errors import NotFoundError, UnprocessableEntityError

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
                                                     stream_mode="messages-tuple")]
    out["second"] = await red.runs.wait(tid, "chat", input=ask("Is it tested?"))
    doomed = await red.runs.create(tid, "chat", input=ask("Never mind."))
    await red.runs.cancel(tid, doomed["run_id"], wait=True)
    out["cancelled"] = await red.runs.get(tid, doomed["run_id"])
    joined = await red.runs.create(tid, "chat", input=ask("Thanks."))
    out["joined"] = await red.runs.join(tid, joined["run_id"])
    first = out["parts"][0].data["run_id"]
    out["replay"] = [p async for p in red.runs.join_stream(tid, first, last_event_id="1")]
    out["runs"] = await red.runs.list(tid, limit=10)
    with pytest.raises(NotFoundError):
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


async def message_streams(base_url: str) -> dict[str, Any]:
    red = sdk(base_url, "red")
    tid = (await red.threads.create())["thread_id"]
    out: dict[str, Any] = {"thread": tid}
    for mode in ("messages", "messages-tuple"):
        out[mode] = [p async for p in red.runs.stream(tid, "chat", input=ask("What changed?"),
                                                      stream_mode=mode)]
        out[f"{mode} answer"] = (await red.threads.get_state(tid))["values"]["messages"][-1]
    return out


def test_sdk_streams_messages_as_langgraph_server_does(base_url: str) -> None:
    out = asyncio.run(message_streams(base_url))
    parts, answer = out["messages"], out["messages answer"]
    # "messages": the message's metadata once, then the message so far after each token
    assert [p.event for p in parts[:2]] == ["metadata", "messages/metadata"]
    assert {p.event for p in parts[2:-1]} == {"messages/partial"}, [p.event for p in parts]
    assert parts[-1].event == "end"
    (mid, body), = parts[1].data.items()
    assert list(body) == ["metadata"] and body["metadata"]["langgraph_node"] == "answer"
    assert body["metadata"]["thread_id"] == out["thread"]
    sofar = [p.data for p in parts if p.event == "messages/partial"]
    assert all(len(d) == 1 and d[0]["id"] == mid and d[0]["type"] == "ai" for d in sofar)
    texts = [d[0]["content"] for d in sofar]
    assert len(texts) > 1 and all(b.startswith(a) for a, b in zip(texts, texts[1:]))
    assert texts[-1] == answer["content"] and mid == answer["id"]
    # "messages-tuple": [chunk, metadata] pairs under "messages", as before
    pairs = out["messages-tuple"]
    assert {p.event for p in pairs[1:-1]} == {"messages"}, [p.event for p in pairs]
    chunks = [p.data for p in pairs[1:-1]]
    assert all(c["type"] == "AIMessageChunk" and m["langgraph_node"] == "answer"
               and m["thread_id"] == out["thread"] for c, m in chunks)
    assert "".join(c["content"] for c, _ in chunks) == out["messages-tuple answer"]["content"]


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


async def surface(base_url: str) -> dict[str, Any]:
    red = sdk(base_url, "red")
    out: dict[str, Any] = {"graph": await red.assistants.get_graph("chat"),
                           "schemas": await red.assistants.get_schemas("chat")}
    tid = (await red.threads.create(metadata={"owner": "ann"}))["thread_id"]
    await red.runs.wait(tid, "chat", input=ask("What changed?"))
    out["history"] = await red.threads.get_history(tid, limit=50)
    first = out["history"][0]["checkpoint"]
    out["at"] = await red.threads.get_state(tid, checkpoint=first)
    out["update"] = await red.threads.update_state(
        tid, {"messages": [{"role": "user", "content": "Noted."}]}, as_node="answer")
    out["updated"] = await red.threads.get_state(tid)
    out["patched"] = await red.threads.update(tid, metadata={"stage": "review"})
    out["copy"] = await red.threads.copy(tid)
    out["copy_state"] = await red.threads.get_state(out["copy"]["thread_id"])
    out["parts"] = [p async for p in red.runs.stream(
        tid, "chat", input=ask("Stream it."), stream_mode=["events", "debug"])]
    await red.runs.wait(tid, "chat", input=ask("Pause."), interrupt_before=["answer"])
    out["paused"] = await red.threads.get_state(tid)
    out["continued"] = await red.runs.wait(tid, "chat")  # no input: goes on from there
    running = await red.runs.create(tid, "chat", input=ask("One."))
    queued = await red.runs.create(tid, "chat", input=ask("Two."),
                                   multitask_strategy="enqueue")
    out["queued"] = queued
    out["after_queue"] = await red.runs.join(tid, queued["run_id"])
    out["first_of_queue"] = await red.runs.get(tid, running["run_id"])
    before = await red.threads.get_state(tid)
    refused = {}
    for name, call in {
            "role": red.runs.create(tid, "chat", input={"messages": [{"role": 5}]}),
            "rollback": red.runs.create(tid, "chat", input=ask("x"),
                                        multitask_strategy="rollback"),
            "webhook": red.runs.create(tid, "chat", input=ask("x"),
                                       webhook="http://localhost:1/hook"),
            "node": red.runs.create(tid, "chat", input=ask("x"), interrupt_before=["nope"]),
            "select": red.threads.get_history(tid, select=["values"]),
            "values": red.threads.update_state(tid, {"messages": [{"role": 5}]})}.items():
        with pytest.raises(UnprocessableEntityError) as e:
            await call
        refused[name] = e.value.response.text
    out["refused"] = refused
    out["untouched"] = (await red.threads.get_state(tid)) == before
    out["after_refusals"] = await red.runs.wait(tid, "chat", input=ask("Still here?"))
    await red.threads.delete(tid)
    with pytest.raises(NotFoundError):
        await red.threads.get(tid)
    return out


def test_sdk_thread_surface_and_refusals(base_url: str) -> None:
    out = asyncio.run(surface(base_url))
    assert {n["id"] for n in out["graph"]["nodes"]} == {
        "__start__", "register_context", "answer", "__end__"}
    assert "messages" in out["schemas"]["input_schema"]["properties"]
    hist = out["history"]
    assert len(hist) >= 4 and [m["type"] for m in hist[0]["values"]["messages"]] == [
        "human", "ai"]
    assert hist[-1]["next"] == ["__start__"]  # the oldest: the run's input
    assert out["at"]["checkpoint_id"] == hist[0]["checkpoint_id"]
    assert out["update"]["checkpoint"]["checkpoint_id"] == out["updated"]["checkpoint_id"]
    assert out["updated"]["values"]["messages"][-1]["content"] == "Noted."
    assert out["patched"]["metadata"] == {"owner": "ann", "stage": "review"}
    assert out["copy_state"]["values"] == out["updated"]["values"]
    kinds = [p.event for p in out["parts"]]
    assert {"metadata", "events", "debug", "end"} <= set(kinds), kinds
    events = [p.data["event"] for p in out["parts"] if p.event == "events"]
    assert "on_chat_model_start" in events and events[-1] == "on_chain_end"
    assert out["paused"]["next"] == ["answer"]
    assert out["paused"]["values"]["messages"][-1]["content"] == "Pause."
    assert out["continued"]["messages"][-1]["type"] == "ai"
    assert out["queued"]["status"] == "pending" and \
        out["queued"]["multitask_strategy"] == "enqueue"
    assert out["first_of_queue"]["status"] == "success"
    tail = [m["content"] for m in out["after_queue"]["messages"] if m["type"] == "human"]
    assert tail[-2:] == ["One.", "Two."]
    refused = out["refused"]
    assert "role" in refused["role"] and "rollback" in refused["rollback"]
    assert "webhook" in refused["webhook"] and "nope" in refused["node"]
    assert "select" in refused["select"] and "values" in refused["values"]
    assert out["untouched"]
    assert out["after_refusals"]["messages"][-1]["type"] == "ai"


def said(answer: Any, thread_id: str) -> dict[str, Any]:
    """An error answer without its request id, the thread id replaced."""
    error = {k: v for k, v in answer.json()["error"].items() if k != "request_id"}
    return {k: v.replace(thread_id, "ID") if isinstance(v, str) else v
            for k, v in error.items()}


THREAD_ROUTES = [  # (method, path under /threads/{id}, JSON body)
    ("GET", "", None), ("PATCH", "", {"metadata": {"k": 1}}), ("POST", "/copy", None),
    ("GET", "/state", None), ("GET", "/state/CP", None),
    ("POST", "/state/checkpoint", {"checkpoint": {"checkpoint_id": "CP"}}),
    ("POST", "/state", {"values": {"messages": [{"role": "user", "content": "x"}]}}),
    ("POST", "/history", {"limit": 5}), ("GET", "/runs", None),
    ("POST", "/runs", {"assistant_id": "chat", "input": ask("x")}),
    ("POST", "/runs/wait", {"assistant_id": "chat", "input": ask("x")}),
    ("POST", "/runs/stream", {"assistant_id": "chat", "input": ask("x")}),
    ("GET", "/runs/RUN", None), ("GET", "/runs/RUN/join", None),
    ("GET", "/runs/RUN/stream", None), ("POST", "/runs/RUN/cancel", None),
    ("DELETE", "", None)]


def test_every_thread_route_scopes_thread_ids_by_team(base_url: str) -> None:
    import httpx

    from tests.conftest import auth

    owners = {}
    red = sdk(base_url, "red")

    async def make() -> None:
        for team in ("red", "blue", "gold"):
            owners[team] = (await sdk(base_url, team).threads.create())["thread_id"]
        run = await red.runs.create(owners["red"], "chat", input=ask("Mine."))
        await red.runs.join(owners["red"], run["run_id"])
        owners["run"] = run["run_id"]
        owners["cp"] = (await red.threads.get_state(owners["red"]))["checkpoint_id"]

    asyncio.run(make())
    seen: list[tuple[str, str, str, int]] = []
    with httpx.Client(base_url=base_url, timeout=120) as http:
        def hit(team: str, tid: str, method: str, path: str, body: Any) -> httpx.Response:
            path = path.replace("RUN", owners["run"]).replace("CP", owners["cp"])
            js = body and {**body, **({"checkpoint": {"checkpoint_id": owners["cp"]}}
                                      if "checkpoint" in body else {})}
            return http.request(method, f"/teams/{team}/threads/{tid}{path}", json=js,
                                headers=auth(team))

        for owner in ("red", "blue", "gold"):
            for intruder in ("red", "blue", "gold", "green"):
                if intruder == owner:
                    continue
                for method, path, body in THREAD_ROUTES:
                    theirs = hit(intruder, owners[owner], method, path, body)
                    absent = hit(intruder, "no-such-thread", method, path, body)
                    seen.append((intruder, owner, f"{method} {path}", theirs.status_code))
                    assert theirs.status_code == absent.status_code == 404, (
                        intruder, owner, method, path, theirs.text)
                    assert said(theirs, owners[owner]) == said(absent, "no-such-thread")
        # the owner still has it, unchanged; the same id is free in another team
        mine = http.get(f"/teams/red/threads/{owners['red']}/state", headers=auth("red"))
        assert mine.status_code == 200
        assert mine.json()["values"]["messages"][0]["content"] == "Mine."
        same = http.post("/teams/gold/threads", json={"thread_id": owners["red"]},
                         headers=auth("gold"))
        assert same.status_code == 200 and same.json()["thread_id"] == owners["red"]
        assert http.get(f"/teams/gold/threads/{owners['red']}/state",
                        headers=auth("gold")).json()["values"] == {}
    assert len(seen) == 3 * 3 * len(THREAD_ROUTES)
