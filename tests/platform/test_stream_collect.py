"""stream_collect.py: a chat's answer assembled from its event stream, on events as
vLLM 0.26 streams them for a forced tool choice (a call cut by max_tokens included)."""

from __future__ import annotations

from granikv_platform.stream_collect import as_stream, assemble_chat, events, forced_tool

HEAD = '"id":"chatcmpl-1","object":"chat.completion.chunk","created":7,"model":"tiny-llama"'
ROLE = ('data: {' + HEAD + ',"choices":[{"index":0,"delta":{"role":"assistant","content":""},'
        '"logprobs":null,"finish_reason":null}]}\n\n')
CALL = ('data: {' + HEAD + ',"choices":[{"index":0,"delta":{"content":null,"tool_calls":[{'
        '"id":"chatcmpl-tool-9","type":"function","index":0,"function":{"name":"f",'
        '"arguments":"{\\"a\\": "}}]},"logprobs":null,"finish_reason":null}]}\n\n')
MORE = ('data: {' + HEAD + ',"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,'
        '"function":{"arguments":"\\"x\\"}"}}]},"logprobs":null,"finish_reason":"length",'
        '"stop_reason":null}]}\n\n')
USAGE = ('data: {' + HEAD + ',"choices":[],"usage":{"prompt_tokens":6,"total_tokens":22,'
         '"completion_tokens":16}}\n\ndata: [DONE]\n\n')


def test_a_forced_tool_call_is_assembled_from_its_deltas() -> None:
    answer = assemble_chat(events([ROLE, CALL + MORE, USAGE]))
    assert answer == {
        "id": "chatcmpl-1", "object": "chat.completion", "created": 7, "model": "tiny-llama",
        "choices": [{"index": 0, "message": {
            "role": "assistant", "content": "", "tool_calls": [{
                "id": "chatcmpl-tool-9", "type": "function",
                "function": {"name": "f", "arguments": '{"a": "x"}'}}]},
            "logprobs": None, "finish_reason": "length", "stop_reason": None}],
        "usage": {"prompt_tokens": 6, "total_tokens": 22, "completion_tokens": 16}}


def test_text_without_a_call_and_an_error_event() -> None:
    text = ('data: {' + HEAD + ',"choices":[{"index":1,"delta":{"content":"hi"},'
            '"finish_reason":"stop"}]}\n\n')
    answer = assemble_chat(events([ROLE, text]))
    assert [c["message"]["content"] for c in answer["choices"]] == ["", "hi"]
    assert [c["finish_reason"] for c in answer["choices"]] == [None, "stop"]
    error = 'data: {"error": {"message": "x", "type": "InternalServerError", "code": 500}}\n\n'
    assert assemble_chat(events([ROLE, error, "data: [DONE]\n\n"])) == {
        "error": {"message": "x", "type": "InternalServerError", "code": 500}}


def test_which_bodies_are_forced() -> None:
    tools = [{"type": "function", "function": {"name": "f"}}]
    assert forced_tool({"tools": tools, "tool_choice": "required"})
    assert forced_tool({"tools": tools, "tool_choice": {"type": "function",
                                                        "function": {"name": "f"}}})
    assert not forced_tool({"tools": tools, "tool_choice": "auto"})
    assert not forced_tool({"tools": [], "tool_choice": "required"})
    assert as_stream({"a": 1}) == {"a": 1, "stream": True,
                                   "stream_options": {"include_usage": True}}
