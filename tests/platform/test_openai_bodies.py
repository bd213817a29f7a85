"""openai_bodies: vLLM's request models, with a body that makes vLLM's own validator
raise TypeError reported as invalid (422) rather than crashing the handler (500)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from vllm.entrypoints.openai.chat_completion import protocol as vllm_chat

from granikv_platform.openai_bodies import ChatCompletionRequest, CompletionRequest

BAD = {"model": "m", "messages": [{"role": "assistant", "content": "x", "tool_calls": 5}]}


def test_vllms_own_model_raises_type_error_on_such_a_body() -> None:
    with pytest.raises(TypeError):  # what made the ingress answer 500
        vllm_chat.ChatCompletionRequest.model_validate({**BAD, "messages": [
            dict(BAD["messages"][0])]})


def test_it_is_a_validation_error_here_and_good_bodies_are_vllms() -> None:
    with pytest.raises(ValidationError, match="invalid request body"):
        ChatCompletionRequest.model_validate(BAD)
    ok = ChatCompletionRequest.model_validate(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3})
    assert isinstance(ok, vllm_chat.ChatCompletionRequest) and ok.max_tokens == 3
    assert CompletionRequest.model_validate({"model": "m", "prompt": "a"}).prompt == "a"
    # the OpenAPI document keeps vLLM's names
    assert ChatCompletionRequest.model_json_schema()["title"] == "ChatCompletionRequest"
