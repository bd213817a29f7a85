"""``langgraph-sdk``'s stateless runs (``client.runs.wait(None, ...)`` and
``client.runs.stream(None, ...)``: POST /runs/wait and /runs/stream under the team's
root) are refused as the other features the platform does not carry out: a 422 that
names them and says to create a thread first (the suite's Serve app). The SDK's
``runs.wait`` raises httpx's HTTPStatusError (its reconnecting request), ``runs.stream``
its UnprocessableEntityError (a subclass)."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from tests.agents.test_langgraph_sdk import ask, sdk

pytestmark = [pytest.mark.ray, pytest.mark.vllm]


async def refusals(base_url: str) -> dict[str, str]:
    red = sdk(base_url, "red")
    out = {}
    with pytest.raises(httpx.HTTPStatusError) as e:
        await red.runs.wait(None, "chat", input=ask("hi"))
    assert e.value.response.status_code == 422
    out["wait"] = e.value.response.text
    with pytest.raises(httpx.HTTPStatusError) as e:
        _ = [p async for p in red.runs.stream(None, "chat", input=ask("hi"))]
    out["stream"] = e.value.response.text
    return out


def test_a_stateless_run_is_a_422_that_says_to_create_a_thread(base_url: str) -> None:
    for route, text in asyncio.run(refusals(base_url)).items():
        error = json.loads(text)["error"]
        assert error["code"] == 422 and error["request_id"], (route, error)
        assert error["type"] == "UnprocessableEntityError", (route, error)
        assert "stateless runs" in error["message"], (route, error)
        assert "create a thread" in error["message"], (route, error)
