"""A chat answer assembled from its own event stream: pure functions, no engine.

With a forced tool choice (a named tool, or "required"), vLLM parses a streamed answer
as it goes (the tool call's name, then its arguments, as deltas) but an unstreamed one
only at its end, whole: an answer cut by ``max_tokens`` in the middle of the call then
fails to parse and comes back as the raw ``<tool_call>`` text in ``content`` with no
``tool_calls``, where the stream had sent the call. The platform serves such a chat
unstreamed by streaming it and assembling the events (``assemble_chat``), so both forms
carry the same message.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any


def forced_tool(body: Mapping[str, Any]) -> bool:
    """Whether a chat body names tools and forces one (a named tool or "required")."""
    choice = body.get("tool_choice")
    return bool(body.get("tools")) and (
        choice == "required" or (isinstance(choice, dict) and choice.get("type") == "function"))


def as_stream(body: Mapping[str, Any]) -> dict[str, Any]:
    """``body`` streamed, with the usage in its last event."""
    return {**body, "stream": True, "stream_options": {"include_usage": True}}


def events(texts: Iterable[str]) -> list[dict[str, Any]]:
    """The JSON events of SSE texts, without ``[DONE]``."""
    out = []
    for text in texts:
        for line in text.split("\n"):
            if line.startswith("data: ") and line != "data: [DONE]":
                out.append(json.loads(line[6:]))
    return out


def assemble_chat(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """A ``chat.completion`` from its ``chat.completion.chunk`` events, or the error
    event's body (``{"error": ...}``) when the stream carried one."""
    for c in chunks:
        if "error" in c:
            return {"error": c["error"]}
    choices: dict[int, dict[str, Any]] = {}
    usage = None
    for c in chunks:
        usage = c.get("usage") or usage
        for ch in c.get("choices") or []:
            _add(choices.setdefault(ch["index"], _empty(ch["index"])), ch)
    head = chunks[0] if chunks else {}
    return {"id": head.get("id"), "object": "chat.completion", "created": head.get("created"),
            "model": head.get("model"),
            "choices": [_finish(choices[i]) for i in sorted(choices)], "usage": usage}


def _empty(index: int) -> dict[str, Any]:
    return {"index": index, "role": "assistant", "content": [], "calls": {},
            "finish_reason": None, "stop_reason": None}


def _add(acc: dict[str, Any], ch: Mapping[str, Any]) -> None:
    delta = ch.get("delta") or {}
    acc["role"] = delta.get("role") or acc["role"]
    if delta.get("content"):
        acc["content"].append(delta["content"])
    for tc in delta.get("tool_calls") or []:
        call = acc["calls"].setdefault(tc.get("index", 0), {
            "id": None, "type": "function", "function": {"name": "", "arguments": ""}})
        call["id"] = tc.get("id") or call["id"]
        fn = tc.get("function") or {}
        call["function"]["name"] += fn.get("name") or ""
        call["function"]["arguments"] += fn.get("arguments") or ""
    if ch.get("finish_reason") is not None:
        acc["finish_reason"] = ch["finish_reason"]
        acc["stop_reason"] = ch.get("stop_reason")


def _finish(acc: dict[str, Any]) -> dict[str, Any]:
    calls = [acc["calls"][i] for i in sorted(acc["calls"])]
    content = "".join(acc["content"])
    return {"index": acc["index"],
            "message": {"role": acc["role"], "content": content, "tool_calls": calls},
            "logprobs": None, "finish_reason": acc["finish_reason"],
            "stop_reason": acc["stop_reason"]}
