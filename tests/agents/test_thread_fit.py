"""A thread run's length against the model, on the platform (the suite's Serve app, the
tiny model, team red's ``chat`` assistant through ``langgraph-sdk``): a message that
cannot fit is refused (400, naming the limit) before anything is stored, and the thread
takes the next run; a run that fails when it runs (its graph's prompt, here the agent's
role, pushes it over the limit) answers its wait as LangGraph Server does, with
``__error__``, and the SDK raises; the next run on that thread is refused up front."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_client

from tests.conftest import API_KEYS, LIMITS

pytestmark = [pytest.mark.ray, pytest.mark.vllm]
Client = Callable[[str | None], httpx.Client]
RED_CONTEXT = (Path(__file__).resolve().parents[2] / "deploy" / "contexts" /
               "red.md").read_text()


def sdk(base_url: str) -> Any:
    return get_client(url=f"{base_url}/teams/red", api_key=API_KEYS["red"])


def ask(text: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}]}


def measured(c: httpx.Client, text: str) -> int:
    """Tokens of red's context and ``text`` as one chat, as the platform counts them."""
    r = c.post("/tokenize", json={"messages": [
        {"role": "system", "content": RED_CONTEXT}, {"role": "user", "content": text}],
        "add_generation_prompt": True})
    assert r.status_code == 200, r.text
    return int(r.json()["count"])


def just_under(c: httpx.Client, limit: int) -> str:
    """A message whose measured chat is a few tokens under ``limit``."""
    lo, hi = 1, 4000
    while lo < hi:  # the most words whose chat is at most limit - 4 tokens
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if measured(c, "word " * mid) <= limit - 4 else (lo, mid - 1)
    return "word " * lo


async def too_long(base_url: str) -> dict[str, Any]:
    red = sdk(base_url)
    tid = f"fit-{uuid.uuid4().hex[:8]}"
    await red.threads.create(thread_id=tid)
    first = await red.runs.wait(tid, "chat", input=ask("What changed?"))
    out: dict[str, Any] = {"first": first, "state": await red.threads.get_state(tid)}
    long = " ".join(f"w{i}" for i in range(1200))[:6000]  # 6,000 characters
    refusals = []
    for call in (lambda: red.runs.create(tid, "chat", input=ask(long)),
                 lambda: red.runs.wait(tid, "chat", input=ask(long)),
                 lambda: red.runs.create(tid, "chat", input=ask(long),
                                         multitask_strategy="enqueue")):
        with pytest.raises(httpx.HTTPStatusError) as e:  # the SDK's wait: not mapped
            await call()
        assert e.value.response.status_code == 400
        refusals.append(e.value.response.json())
    out["refusals"] = refusals
    out["after"] = await red.threads.get_state(tid)
    out["thread"] = await red.threads.get(tid)
    out["runs"] = await red.runs.list(tid, limit=10)
    out["next"] = await red.runs.wait(tid, "chat", input=ask("Is it tested?"))
    return out


def test_too_long_message_is_refused_before_it_is_stored(base_url: str) -> None:
    out = asyncio.run(too_long(base_url))
    assert len(out["first"]["messages"]) == 2
    for body in out["refusals"]:
        message = body["error"]["message"]
        assert f"({LIMITS['max_prompt_tokens']}, limits.max_prompt_tokens)" in message, body
    assert out["after"] == out["state"]  # nothing checkpointed
    assert out["thread"]["status"] == "idle"
    assert [r["status"] for r in out["runs"]] == ["success"]  # no run was stored
    assert [m["type"] for m in out["next"]["messages"]] == ["human", "ai", "human", "ai"]


async def fails_when_run(base_url: str, text: str) -> dict[str, Any]:
    red = sdk(base_url)
    tid = f"fit-{uuid.uuid4().hex[:8]}"
    await red.threads.create(thread_id=tid)
    out: dict[str, Any] = {}
    with pytest.raises(Exception) as e:  # the SDK raises on the __error__ body
        await red.runs.wait(tid, "chat", input=ask(text))
    out["raised"] = str(e.value)
    runs = await red.runs.list(tid, limit=10)
    out["run"] = runs[0]
    out["thread"] = await red.threads.get(tid)
    async with httpx.AsyncClient(base_url=f"{base_url}/teams/red", timeout=120,
                                 headers={"x-api-key": API_KEYS["red"]}) as c:
        out["join"] = await c.get(f"/threads/{tid}/runs/{runs[0]['run_id']}/join")
    with pytest.raises(httpx.HTTPStatusError) as refused:
        await red.runs.create(tid, "chat", input=ask("And now?"))
    assert refused.value.response.status_code == 400
    out["next"] = refused.value.response.json()
    return out


def test_failed_run_waits_with_its_error(base_url: str, client: Client) -> None:
    text = just_under(client("red"), LIMITS["max_prompt_tokens"])
    out = asyncio.run(fails_when_run(base_url, text))
    assert out["raised"].startswith("LLMCallError: "), out["raised"]
    assert "limits.max_prompt_tokens" in out["raised"]
    assert out["run"]["status"] == "error" and out["thread"]["status"] == "error"
    join = out["join"]
    assert join.status_code == 200, join.text  # LangGraph Server's: the error in the body
    assert set(join.json()) == {"__error__"}, join.text
    assert join.json()["__error__"]["error"] == "LLMCallError"
    assert "limits.max_prompt_tokens" in out["next"]["error"]["message"], out["next"]
