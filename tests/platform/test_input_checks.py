"""The checks a request passes before the engine, without an engine: token ids against a
vocabulary (token_ids.py), structured-output constraints with xgrammar's own validation
(structured_checks.py), the context length (input_checks.length_problem), and how an
event stream ended (stream_end.py)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest
from vllm.sampling_params import StructuredOutputsParams
from vllm.tool_parsers.utils import get_json_schema_from_tools

from granikv_platform.input_checks import length_problem
from granikv_platform.stream_end import StreamEnd, before_done, error_event
from granikv_platform.structured_checks import choice_grammar, structured_problem
from granikv_platform.token_ids import (
    detokenize_problem,
    out_of_range,
    prompt_problem,
    sampling_problem,
)

VOCAB = 1024
EDGE = [(VOCAB - 1, True), (VOCAB, False), (-1, False), (2**31, False)]


@pytest.mark.parametrize(("t", "ok"), EDGE)
def test_prompt_ids_at_the_vocabulary_edge(t: int, ok: bool) -> None:
    assert (prompt_problem([[1, 2], [t]], VOCAB) is None) is ok
    why = prompt_problem([[t]], VOCAB)
    if not ok:
        assert why == (f"prompt: token id(s) [{t}] out of range; token ids must be integers "
                       f"in [0, {VOCAB}) (the model's vocabulary has {VOCAB} tokens)")


@pytest.mark.parametrize(("t", "ok"), EDGE)
@pytest.mark.parametrize("field", ["stop_token_ids", "allowed_token_ids",
                                   "logprob_token_ids", "logit_bias"])
def test_sampling_ids_at_the_vocabulary_edge(field: str, t: int, ok: bool) -> None:
    value = {str(t): 1.0} if field == "logit_bias" else [0, t]
    why = sampling_problem({field: value}, VOCAB)
    assert (why is None) is ok, why
    if not ok:
        assert why is not None and why.startswith(f"{field}: token id(s) [{t}]")


def test_absent_fields_and_other_types() -> None:
    assert sampling_problem({"stop_token_ids": None, "logit_bias": None}, VOCAB) is None
    assert out_of_range([True, 1.5, "3", 3], VOCAB) == [True, 1.5, "3"]
    assert out_of_range(range(VOCAB, VOCAB + 10), VOCAB) == list(range(VOCAB, VOCAB + 5))
    assert sampling_problem({"logit_bias": {"x": 1}}, VOCAB) is not None


def test_detokenize_checks_the_tokenizer_size() -> None:
    assert detokenize_problem([0, 999], 1000) is None
    assert detokenize_problem([1000], 1000) == (
        "tokens: token id(s) [1000] out of range; token ids must be integers in [0, 1000) "
        "(the tokenizer has 1000 tokens)")


def test_the_context_length_counts_prompt_and_output() -> None:
    assert length_problem(1448, 600, 2048) is None
    assert length_problem(2047, None, 2048) is None
    assert length_problem(2048, None, 2048) is not None
    why = length_problem(1679, 600, 2048)
    assert why is not None and "prompt contains 1679 input tokens, for a total of 2279" in why


def test_self_referencing_tool_schemas_are_refused() -> None:
    """A forced tool whose parameters are ``{"$ref": "#"}`` becomes a structural tag
    xgrammar refuses (vLLM's fallback's validation raised a KeyError: a 500)."""
    selfref = [{"type": "function", "function": {"name": "f", "parameters": {"$ref": "#"}}}]
    why = structured_problem(StructuredOutputsParams(structural_tag=_tag({"$ref": "#"})))
    assert why is not None and "Circular $ref" in why, why
    plain = {"type": "object", "properties": {"a": {"type": "string"}}}
    assert structured_problem(StructuredOutputsParams(structural_tag=_tag(plain))) is None
    schema = get_json_schema_from_tools(tool_choice="required", tools=_tools(selfref))
    assert structured_problem(StructuredOutputsParams(json=schema)) is None  # a valid array


def test_choices_and_regexes_xgrammar_refuses() -> None:
    why = structured_problem(StructuredOutputsParams(choice=["a\nb", "c"]))
    assert why is not None and why.startswith(
        "structured output: Failed to transform choices into a grammar: EBNF lexer error"), why
    assert ".cc" not in why
    assert structured_problem(StructuredOutputsParams(regex="a(b")) is not None
    ok = StructuredOutputsParams(choice=["a", "b"])
    assert structured_problem(ok) is None
    assert ok.choice == ["a", "b"] and ok.grammar is None  # checked on a copy
    assert structured_problem(None) is None
    assert structured_problem(StructuredOutputsParams(choice=["a\nb"]), "guidance") is None


def test_a_choice_with_control_characters_becomes_an_escaped_grammar() -> None:
    call = '<tool_call>\n{"name": "get_weather"}\n</tool_call>'
    grammar = choice_grammar([call, "a\tb\x01"])
    assert grammar == ('root ::= "<tool_call>\\n{\\"name\\": \\"get_weather\\"}\\n'
                       '</tool_call>" | "a\\tb\\x01"')
    assert structured_problem(StructuredOutputsParams(grammar=grammar)) is None
    assert structured_problem(StructuredOutputsParams(choice=[call])) is not None  # as is
    assert choice_grammar(["plain", 'quoted "x"']) is None  # vLLM's own escaping will do


def test_a_stream_without_finish_or_error_is_abnormal() -> None:
    role = 'data: {"choices":[{"index":0,"delta":{"role":"assistant"},"finish_reason":null}]}\n\n'
    end = StreamEnd()
    for chunk in (role, "data: [DONE]\n\n"):
        end.see(chunk)
    assert end.done and end.abnormal
    text = before_done("data: [DONE]\n\n", error_event("failed"))
    assert text == ('data: {"error": {"message": "failed", "type": "InternalServerError", '
                    '"code": 500}}\n\ndata: [DONE]\n\n')


def test_a_finish_or_an_error_event_is_a_normal_end() -> None:
    finished = StreamEnd()
    finished.see('data: {"choices":[{"delta":{},"finish_reason":"length"}]}\n\n')
    assert not finished.abnormal
    errored = StreamEnd()
    errored.see('data: {"error": {"message": "x", "code": 500}}\n\n')
    assert not errored.abnormal
    quoted = StreamEnd()  # the words inside a token's text are escaped, not a key
    quoted.see('data: {"choices":[{"delta":{"content":"\\"finish_reason\\": \\"x"},'
               '"finish_reason":null}]}\n\n')
    assert quoted.abnormal
    spaced = StreamEnd()  # JSON written with spaces, as another server may
    spaced.see('data: {"choices": [{"finish_reason": null}]}\n\n')
    assert spaced.abnormal
    spaced.see('data: {"choices": [{"finish_reason": "stop"}]}\n\n')
    assert not spaced.abnormal
    batched = StreamEnd()  # several events in one text: the second one finishes
    batched.see('data: {"choices":[{"index":0,"finish_reason":null}]}\n\n'
                'data: {"choices":[{"index":1,"finish_reason":"length"}]}\n\n')
    assert not batched.abnormal


def _tools(raw: list[dict[str, object]]) -> list[object]:
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    request = ChatCompletionRequest.model_validate(
        {"model": "m", "messages": [{"role": "user", "content": "x"}], "tools": raw})
    return list(request.tools or [])


def _tag(schema: dict[str, object]) -> str:
    """A structural tag as a forced tool choice with a ``<tool_call>`` parser makes it."""
    return json.dumps({"type": "structural_tag", "format": {
        "type": "triggered_tags", "triggers": ["<tool_call>"], "tags": [{
            "begin": "<tool_call>", "end": "</tool_call>",
            "content": {"type": "json_schema", "json_schema": schema}}]}})


# What vLLM 0.26 streamed for a chat whose constraint xgrammar refused after admission:
# the role chunk, then [DONE] (the unstreamed form was a 500).
FAILED_STREAM = [
    'data: {"id":"chatcmpl-8","object":"chat.completion.chunk","created":1,"model":"tiny-llama",'
    '"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,'
    '"finish_reason":null}],"prompt_token_ids":null,"prompt_text":null}\n\n',
    "data: [DONE]\n\n"]


def test_the_engine_hosts_stream_ends_a_failed_stream_with_an_error_event() -> None:
    from granikv_platform.engine import _stream

    async def relay(chunks: list[str]) -> str:
        async def gen() -> AsyncIterator[str]:
            for c in chunks:
                yield c
        return "".join([item.text async for item in _stream(gen())])  # type: ignore[union-attr]

    text = asyncio.run(relay(FAILED_STREAM))
    events = [e for e in text.split("\n\n") if e]
    assert events[-1] == "data: [DONE]"
    error = json.loads(events[-2][6:])["error"]
    assert error["code"] == 500 and error["message"], error
    cut = asyncio.run(relay(FAILED_STREAM[:1]))  # not even [DONE]
    assert cut.endswith("}\n\ndata: [DONE]\n\n") and '{"error":' in cut
    finished = FAILED_STREAM[0].replace('"finish_reason":null', '"finish_reason":"stop"')
    assert asyncio.run(relay([finished, "data: [DONE]\n\n"])) == finished + "data: [DONE]\n\n"
