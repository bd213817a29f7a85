"""A tool call cut by ``max_tokens`` finishes with "length", as the engine said.

vLLM 0.26's chat stream (``OpenAIServingChat.chat_completion_stream_generator``) ends a
choice that streamed a tool call with ``finish_reason: "tool_calls"`` unless a named
tool was forced, whatever the engine's own finish: an answer cut at ``max_tokens`` in
the middle of the call's arguments says "tool_calls", with arguments that are not JSON
(its unstreamed path says "length": it gives "tool_calls" only for the engine's
"stop"). The platform serves an unstreamed forced-tool chat from its stream
(``stream_collect.py``), so both forms said it. ``keep_length`` wraps the stream
generator of a serving object: it notes which choices the engine finished with
"length" (``RequestOutput``, before the serving code reads it) and says "length" in
those choices' finish events. A call that ended ("stop") keeps "tool_calls".
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

_TOOL_CALLS = '"finish_reason":"tool_calls"'  # vLLM's compact JSON (model_dump_json)


def keep_length(serving: Any) -> None:
    """Make ``serving.chat_completion_stream_generator`` (vLLM's OpenAIServingChat)
    say "length" for a choice the engine cut, where it says "tool_calls"."""
    inner = serving.chat_completion_stream_generator

    def generator(request: Any, result_generator: AsyncIterator[Any], *args: Any,
                  **kwargs: Any) -> AsyncIterator[str]:
        cut: set[int] = set()
        texts = inner(request, _noting_cuts(result_generator, cut), *args, **kwargs)
        return _relabelled(texts, cut)

    serving.chat_completion_stream_generator = generator


async def _noting_cuts(results: AsyncIterator[Any], cut: set[int]) -> AsyncIterator[Any]:
    """``results`` (the engine's outputs), adding to ``cut`` the index of each choice
    the engine finished with "length" before the serving code sees it."""
    try:
        async for res in results:
            for out in res.outputs:
                if out.finish_reason == "length":
                    cut.add(out.index)
            yield res
    finally:  # closed early (a client gone): the engine's generator aborts its request
        await _close(results)


async def _relabelled(texts: AsyncIterator[str], cut: set[int]) -> AsyncIterator[str]:
    try:
        async for text in texts:
            yield relabel(text, cut) if cut else text
    finally:
        await _close(texts)


async def _close(gen: Any) -> None:
    aclose = getattr(gen, "aclose", None)
    if aclose is not None:
        await aclose()


def relabel(text: str, cut: set[int]) -> str:
    """``text`` (SSE events) with "length" for the "tool_calls" finish of each choice
    in ``cut``; events without such a finish are returned as they are."""
    if not cut or _TOOL_CALLS not in text:
        return text
    return "\n".join(_relabel_line(line, cut) for line in text.split("\n"))


def _relabel_line(line: str, cut: set[int]) -> str:
    if not line.startswith("data: {") or _TOOL_CALLS not in line:
        return line
    event = json.loads(line[6:])
    changed = False
    for choice in event.get("choices") or []:
        if choice.get("index") in cut and choice.get("finish_reason") == "tool_calls":
            choice["finish_reason"] = "length"
            changed = True
    if not changed:
        return line
    return "data: " + json.dumps(event, ensure_ascii=False, separators=(",", ":"))
