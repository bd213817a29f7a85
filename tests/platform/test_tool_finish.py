"""A tool call cut by ``max_tokens`` finishes with "length", not "tool_calls": vLLM's
stream says "tool_calls" for any choice that streamed a tool call unless a named tool
was forced (its serving.py), also when the engine stopped the answer at max_tokens, and
the platform assembles an unstreamed forced-tool chat from its stream
(``stream_collect.py``). ``tool_finish.keep_length`` puts the engine's own "length"
back: checks on recorded events (test_cut_tool_finish.py: over HTTP)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import pytest

from granikv_platform.tool_finish import keep_length, relabel

# The finish event of a "required" chat cut at max_tokens=6, in vLLM 0.26's form.
CUT = ('data: {"id":"chatcmpl-9","object":"chat.completion.chunk","created":1,'
       '"model":"tiny-llama","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,'
       '"function":{"arguments":" \\"city\\""}}]},"logprobs":null,'
       '"finish_reason":"tool_calls","stop_reason":null}]}\n\n')
ARGS_EVENT = CUT.replace('"finish_reason":"tool_calls"', '"finish_reason":null')


def test_relabel_says_length_for_a_cut_choice_only() -> None:
    out = relabel(CUT, {0})
    choice = json.loads(out[6:])["choices"][0]
    assert choice["finish_reason"] == "length"
    assert choice["delta"]["tool_calls"][0]["function"]["arguments"] == ' "city"'
    assert out.endswith("\n\n")
    assert relabel(CUT, {1}) == CUT  # another choice was cut
    assert relabel(CUT, set()) == CUT
    assert relabel(ARGS_EVENT, {0}) == ARGS_EVENT  # not a finish
    assert relabel("data: [DONE]\n\n", {0}) == "data: [DONE]\n\n"


class FakeServing:
    """vLLM's rule: "tool_calls" once a choice streamed a call, whatever the engine's
    finish (chat_completion/serving.py, chunk generator)."""

    async def chat_completion_stream_generator(
            self, request: Any, results: AsyncIterator[Any], *args: Any,
            **kwargs: Any) -> AsyncIterator[str]:
        async for res in results:
            for out in res.outputs:
                if out.finish_reason is None:
                    yield ARGS_EVENT
                else:
                    yield CUT
        yield "data: [DONE]\n\n"


async def _outputs(finish: str) -> AsyncIterator[Any]:
    yield SimpleNamespace(outputs=[SimpleNamespace(index=0, finish_reason=None)])
    yield SimpleNamespace(outputs=[SimpleNamespace(index=0, finish_reason=finish)])


@pytest.mark.parametrize("engine, said", [("length", "length"), ("stop", "tool_calls")])
def test_keep_length_uses_the_engines_finish(engine: str, said: str) -> None:
    serving = FakeServing()
    keep_length(serving)

    async def run() -> list[str]:
        return [t async for t in serving.chat_completion_stream_generator(
            None, _outputs(engine), "rid", "m")]

    texts = asyncio.run(run())
    assert texts[0] == ARGS_EVENT and texts[-1] == "data: [DONE]\n\n"
    assert json.loads(texts[1][6:])["choices"][0]["finish_reason"] == said


def test_closing_the_stream_closes_the_engines_outputs() -> None:
    """A client gone: closing the wrapped stream reaches the engine's generator (which
    aborts the request in its own ``finally``)."""
    closed = []

    async def outputs() -> AsyncIterator[Any]:
        try:
            while True:
                yield SimpleNamespace(outputs=[SimpleNamespace(index=0, finish_reason=None)])
        finally:
            closed.append(True)

    serving = FakeServing()
    keep_length(serving)

    async def run() -> None:
        stream = serving.chat_completion_stream_generator(None, outputs(), "rid", "m")
        assert await stream.__anext__() == ARGS_EVENT
        await stream.aclose()

    asyncio.run(run())
    assert closed == [True]
