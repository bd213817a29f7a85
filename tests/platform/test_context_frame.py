"""context_frame.py on the Llama 3.1 and Qwen2.5 prompt formats (tests/platform/
templates/), rendered by the chat templates as vLLM renders them (transformers'
apply_chat_template), without an engine: the placeholder's frame, the splice, and the
head that a tool-bearing conversation puts before the context."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from granikv_platform.context_frame import Frame, frame_of, splice
from granikv_platform.team_splice import CONTEXT_PLACEHOLDER, FRAME_PROBE
from tests.platform.template_models import FAMILIES, Family, make_model

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}
CONTEXT = "The team reviews the code of the platform. " * 20 + "Answer briefly."


def render(tok, messages, tools=None, gen=False) -> list[int]:  # type: ignore[no-untyped-def]
    return list(tok.apply_chat_template(messages, tools=tools, tokenize=True,
                                        add_generation_prompt=gen, return_dict=False))


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_a_tool_bearing_chat_starts_with_its_head_and_the_context(family: Family,
                                                                   tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(make_model(family, tmp_path / family.name)))
    system = lambda text: [{"role": "system", "content": text}]  # noqa: E731
    placeholder = render(tok, system(CONTEXT_PLACEHOLDER))
    frame = frame_of(placeholder, render(tok, system(FRAME_PROBE)))
    assert frame.head and frame.tail  # the system header, the end of the message
    p_content = frame.content(placeholder)
    context_prefix = render(tok, system(CONTEXT))  # what a context registers
    content = frame.content(context_prefix)
    assert p_content and content and tok.decode(content) == CONTEXT

    user = [{"role": "user", "content": "Weather in Paris?"}]
    for tools in (None, [WEATHER]):
        with_placeholder = render(tok, system(CONTEXT_PLACEHOLDER) + user, tools, gen=True)
        done = splice(with_placeholder, p_content, content)
        assert done is not None
        # the splice is what rendering the context itself gives, token for token
        assert done.prompt == render(tok, system(CONTEXT) + user, tools, gen=True)
        assert done.starts_with((*done.head, *content))
        if tools is None:  # a plain chat: the context's own prefix
            assert done.head == frame.head and done.starts_with(context_prefix)
        else:  # tools change what surrounds the context: a variant of the prefix
            assert not done.starts_with(context_prefix)
            if family.name == "llama-3.1":  # "Environment: ipython" before the context
                assert done.head != frame.head
                assert "Environment: ipython" in tok.decode(done.head)
            else:  # Qwen2.5: the tools follow the context in the same block
                assert done.head == frame.head


def test_frame_content_and_splice_edges() -> None:
    frame = frame_of([1, 2, 10, 11, 3], [1, 2, 20, 3])
    assert frame == Frame((1, 2), (3,))
    assert frame.content([1, 2, 7, 8, 3]) == (7, 8)
    assert frame.content([1, 2, 3]) is None  # no content
    assert frame.content([9, 2, 7, 3]) is None  # another head
    assert frame.content([1, 2, 7, 4]) is None  # another tail
    done = splice([1, 2, 10, 11, 3, 5, 10, 11], [10, 11], [7, 7, 7])
    assert done is not None and done.prompt == [1, 2, 7, 7, 7, 3, 5, 10, 11]
    assert done.head == (1, 2) and done.starts_with([1, 2, 7]) and not done.starts_with([1, 3])
    assert splice([1, 2, 3], [10, 11], [7]) is None and splice([1], [], [7]) is None


def test_a_splice_binds_the_context_or_a_variant_or_nothing() -> None:
    import asyncio
    from types import SimpleNamespace

    from granikv_platform.team_splice import ContextSplice, SpliceCounters

    asked: list[tuple[int, ...]] = []

    async def variant(tokens: tuple[int, ...]) -> tuple[str, str]:
        asked.append(tokens)
        if tokens[0] == 99:
            raise RuntimeError("no room")
        return "ctx:v", "filling" if tokens[0] == 98 else "ready"

    def bind(prompt: list[int], binder: object = variant) -> tuple[ContextSplice, Any]:
        s = ContextSplice((10,), (7, 7), (1, 7, 7, 3), "text", SpliceCounters(), binder)  # type: ignore[arg-type]
        req = SimpleNamespace(vllm_xargs={"granikv_team": "red", "granikv_prefix_id": "ctx"})
        done = splice(prompt, [10], [7, 7])
        assert done is not None
        asyncio.run(s.bind(req, [done]))
        return s, req.vllm_xargs

    s, xargs = bind([1, 10, 3, 4])  # the context's own prefix
    assert s.outcome == "hit" and xargs["granikv_prefix_id"] == "ctx" and not asked
    s, xargs = bind([1, 5, 10, 6, 4])  # something before the context, and after it
    assert s.outcome == "hit" and xargs["granikv_prefix_id"] == "ctx:v"
    assert asked == [(1, 5, 7, 7)] and s.counters.variants == 1
    s, xargs = bind([98, 10, 4])  # registered, still filling: bound, not read from HOT yet
    assert s.outcome == "miss; reason=not-in-hot (state filling)"
    assert xargs["granikv_prefix_id"] == "ctx:v" and s.counters.variants == 1
    s, xargs = bind([99, 10, 4])  # the variant could not be registered: unbound
    assert s.outcome.startswith("miss; reason=variant-not-registered")
    assert "granikv_prefix_id" not in xargs and s.counters.variants == 0
    s, xargs = bind([1, 5, 10, 4], binder=None)
    assert s.outcome == "miss; reason=prompt-mismatch" and xargs["granikv_prefix_id"] == "ctx"


def test_framed_as_agrees_with_starts_with() -> None:
    frame = Frame((1, 2), (3,))
    context_prefix = (1, 2, 7, 7, 3)
    for prompt in ([1, 2, 10, 3, 5], [1, 2, 10, 4, 5], [9, 1, 2, 10, 3, 5], [1, 2, 10]):
        done = splice(prompt, [10], [7, 7])
        assert done is not None
        assert done.framed_as(frame) == done.starts_with(context_prefix), prompt
