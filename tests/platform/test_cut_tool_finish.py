"""A forced tool call cut by ``max_tokens`` finishes with "length", not "tool_calls",
streamed and unstreamed (the platform assembles an unstreamed forced-tool chat from its
stream, ``stream_collect.py``), on /v1 and a team's route (the suite's app)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

TOOL = {"type": "function", "function": {"name": "f", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}
FORCED = ["required", {"type": "function", "function": {"name": "f"}}]


def _streamed(c: httpx.Client, path: str, body: dict[str, Any]) -> tuple[str, str, int]:
    """(arguments, finish_reason, completion tokens) of a streamed answer."""
    body = {**body, "stream": True, "stream_options": {"include_usage": True}}
    args, finish, used = "", None, 0
    with c.stream("POST", path, json=body) as r:
        assert r.status_code == 200, r.read()
        for line in r.iter_lines():
            if not line.startswith("data: {"):
                continue
            event = json.loads(line[6:])
            used = (event.get("usage") or {}).get("completion_tokens", used)
            for ch in event.get("choices") or []:
                for tc in ch["delta"].get("tool_calls") or []:
                    args += (tc.get("function") or {}).get("arguments") or ""
                finish = ch.get("finish_reason") or finish
    return args, str(finish), used


def _whole(c: httpx.Client, path: str, body: dict[str, Any]) -> tuple[str, str, int]:
    r = c.post(path, json=body)
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    args = "".join(tc["function"]["arguments"] for tc in choice["message"]["tool_calls"])
    return args, choice["finish_reason"], r.json()["usage"]["completion_tokens"]


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


@pytest.mark.ray
@pytest.mark.vllm
@pytest.mark.parametrize("choice", FORCED, ids=["required", "named"])
@pytest.mark.parametrize("path", ["/v1/chat/completions", "/teams/red/v1/chat/completions"])
def test_a_cut_forced_tool_call_says_length(client: Callable[[str | None], httpx.Client],
                                            path: str, choice: Any) -> None:
    c = client("red")
    cut = []  # (form, max_tokens, arguments) of the answers cut short of a whole call
    for max_tokens in (8, 16, 24, 32, 48, 64):
        body = {"model": "tiny-llama", "max_tokens": max_tokens, "seed": 0,
                "tools": [TOOL], "tool_choice": choice,
                "messages": [{"role": "user", "content": "weather?"}]}
        for form in (_streamed, _whole):
            args, finish, used = form(c, path, body)
            if used == max_tokens and not _is_json(args):  # the engine cut the call
                assert finish == "length", (form.__name__, max_tokens, args, finish)
                cut.append((form.__name__, max_tokens, args))
            else:  # a whole call: "length" too when the engine cut what followed it
                assert finish in ("tool_calls", "stop", "length"), (form.__name__, finish)
    assert {form for form, _, _ in cut} == {"_streamed", "_whole"}, cut
