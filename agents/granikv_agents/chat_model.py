"""TeamChatModel: the team's LLM as a LangChain chat model, over a ``TeamBackend``.

A graph calls it like ``ChatOpenAI`` (``ainvoke(messages)``); each call is one agent turn
through the backend: the platform puts the team's shared context first (its pinned HOT
prefix) and the messages follow. Chat templates accept one system message, at the start,
and the platform's is the context: ``conversation`` folds the graph's own system messages
(agent roles) into the first user message, so a role never becomes a second system
message. The context is pinned on the first call (idempotent: reused when pinned).
Tool calls need the OpenAI route (``ChatOpenAI`` through ``HttpTeamBackend``'s URL).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.outputs import ChatGeneration, ChatResult
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
        backend: TeamBackend = self.backend
        if self._pin is None:
            self._pin = await backend.pin_context(self.context)
        turn = tuple((_ROLES.get(m.type, "user"), str(m.content))
                     for m in conversation(messages))
        sampling = Sampling(int(kwargs.get("max_tokens", self.max_tokens)),
                            float(kwargs.get("temperature", self.temperature)),
                            kwargs.get("seed", self.seed))
        reply = await backend.chat(TurnRequest(self.agent, 1, "work", turn, sampling),
                                   self._pin)
        usage = {"input_tokens": reply.prompt_tokens, "output_tokens": reply.completion_tokens,
                 "total_tokens": reply.prompt_tokens + reply.completion_tokens}
        msg = AIMessage(reply.text, usage_metadata=usage,  # type: ignore[arg-type]
                        response_metadata={"model_provider": "granikv", "agent": self.agent})
        return ChatResult(generations=[ChatGeneration(message=msg)])
