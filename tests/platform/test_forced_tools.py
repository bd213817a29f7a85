"""A chat with a forced tool choice (a named tool, or "required") answers the same
message streamed and unstreamed, on /v1 and a team's route: the same tool calls (name
and arguments) and finish, also when max_tokens cuts the call (unstreamed, vLLM
returned the raw ``<tool_call>`` text with no tool calls where the stream sent the
call). A seeded request: both forms generate the same tokens."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

pytestmark = [pytest.mark.ray, pytest.mark.vllm]
TOOL = {"type": "function", "function": {"name": "f", "parameters": {
    "type": "object", "properties": {"a": {"type": "string"}}}}}
FORCED = ["required", {"type": "function", "function": {"name": "f"}}]


def streamed(c: httpx.Client, path: str, body: dict[str, Any]) -> dict[str, Any]:
    """The streamed answer's first choice: its tool calls and finish, from the deltas."""
    with c.stream("POST", path, json={**body, "stream": True}) as r:
        assert r.status_code == 200, r.read()
        lines = [x[6:] for x in r.iter_lines() if x.startswith("data: ")]
    assert lines[-1] == "[DONE]", lines[-3:]
    calls: dict[int, dict[str, str]] = {}
    finish = None
    for event in map(json.loads, lines[:-1]):
        assert "error" not in event, event
        for ch in event["choices"]:
            for tc in ch["delta"].get("tool_calls") or []:
                call = calls.setdefault(tc["index"], {"name": "", "arguments": ""})
                call["name"] += tc.get("function", {}).get("name") or ""
                call["arguments"] += tc.get("function", {}).get("arguments") or ""
            finish = ch.get("finish_reason") or finish
    return {"tool_calls": [calls[i] for i in sorted(calls)], "finish_reason": finish}


@pytest.mark.parametrize("choice", FORCED, ids=["required", "named"])
@pytest.mark.parametrize("path", ["/v1/chat/completions", "/teams/red/v1/chat/completions"])
def test_forced_tool_streamed_and_not_agree(client: Callable[[str | None], httpx.Client],
                                            path: str, choice: Any) -> None:
    c = client("red")
    called = []
    for max_tokens in (6, 16, 48):
        body = {"model": "tiny-llama", "max_tokens": max_tokens, "seed": 0,
                "tools": [TOOL], "tool_choice": choice,
                "messages": [{"role": "user", "content": "hi"}]}
        r = c.post(path, json=body)
        assert r.status_code == 200, r.text
        choice0 = r.json()["choices"][0]
        whole = {"tool_calls": [{"name": tc["function"]["name"],
                                 "arguments": tc["function"]["arguments"]}
                                for tc in choice0["message"]["tool_calls"]],
                 "finish_reason": choice0["finish_reason"]}
        assert "<tool_call>" not in (choice0["message"]["content"] or ""), choice0
        assert whole == streamed(c, path, body), (max_tokens, whole)
        called += [tc["name"] for tc in whole["tool_calls"]]
    if choice != "required":  # the named tool's call is sent once its name is known
        assert called and set(called) == {"f"}, called
