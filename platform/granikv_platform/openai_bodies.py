"""vLLM's OpenAI request models, with every malformed body a validation error (a 422).

vLLM's ``ChatCompletionRequest`` normalizes messages in a "before" validator that calls
``list(tool_calls)``; an assistant message whose ``tool_calls`` is a number raises
``TypeError`` there, which pydantic passes through instead of reporting, so FastAPI (and
``vllm serve``) answered 500. These subclasses turn a ``TypeError`` raised while
validating into a validation error; their schemas, names and fields are vLLM's.
"""

from __future__ import annotations

from typing import Any

from pydantic import model_validator
from pydantic_core import PydanticCustomError
from vllm.entrypoints.openai.chat_completion import protocol as chat
from vllm.entrypoints.openai.completion import protocol as completion


class TypeErrorsInvalid:
    """A ``TypeError`` raised while validating (inside vLLM's validators) is a validation
    error, so the answer is a 422 and not a 500."""

    @model_validator(mode="wrap")
    @classmethod
    def _type_errors_are_invalid(cls, data: Any, handler: Any) -> Any:
        try:
            return handler(data)
        except TypeError as e:
            raise PydanticCustomError("invalid_body", "invalid request body: {error}",
                                      {"error": str(e)}) from None


class ChatCompletionRequest(TypeErrorsInvalid, chat.ChatCompletionRequest):
    pass


class CompletionRequest(TypeErrorsInvalid, completion.CompletionRequest):
    pass
