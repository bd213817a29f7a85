"""TeamChatModel: the team's LLM as a LangChain chat model, over a ``TeamBackend``.

A graph calls it like ``ChatOpenAI`` (``ainvoke(messages)``); each call is one agent turn
through the backend: the platform puts the team's shared context first (its pinned HOT
prefix) and the messages follow. Chat templates accept one system message, at the start,
and the platform's is the context: ``conversation`` folds the graph's own system messages
(agent roles) into the first user message, so a role never becomes a second system
message. The context is pinned on the first call (idempotent: reused when pinned).
``bind_tools`` works as ChatOpenAI's: the tools go to the platform (vLLM's tool parser
turns the model's call into ``tool_calls``), an ``AIMessage`` comes back with
``tool_calls``, and ``ToolMessage`` results go back with their call ids; the team's
context stays in HOT (a tool-bearing chat reads a variant of its prefix when the
template puts the tools next to it).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    convert_to_openai_messages,
)
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import ConfigDict, Field, PrivateAttr

from granikv_agents.binding import TeamBackend, TurnRequest
from granikv_agents.state import ContextPin
from granikv_agents.team import Sampling

_ROLES = {"human": "user", "ai": "assistant", "tool": "user", "system": "system"}


def conversation(messages: Sequence[BaseMessage]) -> list[BaseMessage]:
    """The messages with every system message folded into the first user message
    (``Instructions:`` first), in order; other messages unchanged."""
    rules = [str(m.content) for m in messages if isinstance(m, SystemMessage)]
    rest = [m for m in messages if not isinstance(m, SystemMessage)]
    if not rules:
        return rest
    head = "Instructions: " + "\n".join(rules)
    for i, m in enumerate(rest):
        if isinstance(m, HumanMessage):
            return [*rest[:i], HumanMessage(f"{head}\n\n{m.content}", id=m.id), *rest[i + 1:]]
    return [HumanMessage(head), *rest]


def roles_and_texts(messages: Sequence[BaseMessage]) -> tuple[tuple[str, str], ...]:
    """``(role, text)`` pairs as a turn without tools sends them (a tool result as a
    user message)."""
    return tuple((_ROLES.get(m.type, "user"), str(m.content)) for m in messages)


class TeamChatModel(BaseChatModel):
    """The team's model; ``max_tokens``/``temperature``/``seed`` as ChatOpenAI's."""

    model_config = ConfigDict(arbitrary_types_allowed=True)
    backend: Any = Field(exclude=True)  # a TeamBackend
    context: str = Field(description="The team's shared context (pinned on first use).")
    agent: str = "agent"
    max_tokens: int = 256
    temperature: float = 0.0
    seed: int | None = None
    _pin: ContextPin | None = PrivateAttr(None)

    @property
    def _llm_type(self) -> str:
        return "granikv-team"

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None,
                  **kwargs: Any) -> ChatResult:
        raise NotImplementedError("TeamChatModel is async: use ainvoke / astream")

    async def _agenerate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                         run_manager: AsyncCallbackManagerForLLMRun | None = None,
                         **kwargs: Any) -> ChatResult:
        msg = await self._reply(self._request(messages, kwargs))
        return ChatResult(generations=[ChatGeneration(message=msg)])

    async def _astream(self, messages: list[BaseMessage], stop: list[str] | None = None,
                       run_manager: AsyncCallbackManagerForLLMRun | None = None,
                       **kwargs: Any) -> AsyncIterator[ChatGenerationChunk]:
        """Tokens as they are generated (LangGraph's ``stream_mode="messages"``), the
        token counts on the last chunk. A turn with tools, or a backend that does not
        stream, comes as one chunk."""
        request = self._request(messages, kwargs)
        stream = getattr(self.backend, "stream", None)
        if request.tools or request.chat or stream is None:
            msg = await self._reply(request)
            yield ChatGenerationChunk(message=AIMessageChunk(
                content=msg.content, usage_metadata=msg.usage_metadata,
                tool_call_chunks=[{"name": c["name"], "args": json.dumps(c["args"]),
                                   "id": c["id"], "index": i, "type": "tool_call_chunk"}
                                  for i, c in enumerate(msg.tool_calls)],
                response_metadata=msg.response_metadata))
            return
        async for delta in stream(request, await self._pinned()):
            chunk = ChatGenerationChunk(message=AIMessageChunk(
                content=delta.text,
                usage_metadata=None if delta.usage is None else _usage(*delta.usage),  # type: ignore[arg-type]
                response_metadata={"model_provider": "granikv", "agent": self.agent}
                if delta.usage else {}))
            if run_manager is not None and delta.text:
                await run_manager.on_llm_new_token(delta.text, chunk=chunk)
            yield chunk

    async def _pinned(self) -> ContextPin:
        """The team's context, pinned on the first call (idempotent on the platform)."""
        if self._pin is None:
            self._pin = await self.backend.pin_context(self.context)
        return self._pin

    async def _reply(self, request: TurnRequest) -> AIMessage:
        backend: TeamBackend = self.backend
        reply = await backend.chat(request, await self._pinned())
        return AIMessage(reply.text, usage_metadata=_usage(reply.prompt_tokens,  # type: ignore[arg-type]
                                                           reply.completion_tokens),
                         tool_calls=[_tool_call(c) for c in reply.tool_calls],
                         response_metadata={"model_provider": "granikv", "agent": self.agent})

    def _request(self, messages: list[BaseMessage], kwargs: dict[str, Any]) -> TurnRequest:
        said = conversation(messages)
        turn = roles_and_texts(said)
        tools = tuple(kwargs.get("tools") or ())
        with_tools = bool(tools) or any(
            isinstance(m, ToolMessage) or (isinstance(m, AIMessage) and m.tool_calls)
            for m in said)
        sampling = Sampling(int(kwargs.get("max_tokens", self.max_tokens)),
                            float(kwargs.get("temperature", self.temperature)),
                            kwargs.get("seed", self.seed))
        return TurnRequest(
            self.agent, 1, "work", turn, sampling,
            chat=tuple(convert_to_openai_messages(said)) if with_tools else (),  # type: ignore[arg-type]
            tools=tools, tool_choice=kwargs.get("tool_choice"),
            extra_body=kwargs.get("extra_body"))

    def bind_tools(self, tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],
                   *, tool_choice: str | dict[str, Any] | None = None,
                   **kwargs: Any) -> Runnable[LanguageModelInput, AIMessage]:
        """As ChatOpenAI's: ``tool_choice`` "auto", "none", "required", or a tool's name."""
        openai_tools = [convert_to_openai_tool(t) for t in tools]
        if isinstance(tool_choice, str) and tool_choice not in ("auto", "none", "required"):
            tool_choice = {"type": "function", "function": {"name": tool_choice}}
        if tool_choice is not None:
            kwargs["tool_choice"] = tool_choice
        return self.bind(tools=openai_tools, **kwargs)  # type: ignore[return-value]


def _usage(prompt: int, completion: int) -> dict[str, int]:
    return {"input_tokens": prompt, "output_tokens": completion,
            "total_tokens": prompt + completion}


def _tool_call(call: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI tool call as LangChain's ``ToolCall``."""
    f = call["function"]
    args = f.get("arguments") or "{}"
    return {"name": f["name"], "args": json.loads(args) if isinstance(args, str) else args,
            "id": call.get("id"), "type": "tool_call"}
