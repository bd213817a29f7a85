"""LangChain's agent (``langchain.agents.create_agent``, which replaces LangGraph's
``create_react_agent``) on the team's chat model.

    graph: granikv_agents.examples.agent:graph
The agent loops model -> tools -> model until the model answers without a tool call.
Its model is the run's team model: the ``team_model`` middleware hands every model call
to ``kit.team_model(runtime)`` (the platform's model bound to the team's HOT context),
as LangChain's dynamic model selection does. ``RunModel`` only holds the agent's model
slot until then: called on its own, it says what is missing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import ModelRequest, ModelResponse, wrap_model_call
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatResult

from granikv_agents.examples.tools import TOOLS
from granikv_agents.graph import RunContext
from granikv_agents.kit import team_model as run_team_model

INSTRUCTIONS = "Use the tools when they know the answer; answer in one sentence."


class RunModel(BaseChatModel):
    """The agent's model slot: each call is made with the run's team model instead."""

    @property
    def _llm_type(self) -> str:
        return "granikv-run-model"

    def _generate(self, messages: list[BaseMessage], stop: Any = None,
                  run_manager: Any = None, **kw: Any) -> ChatResult:
        raise RuntimeError("RunModel is the run's team model: build the agent with the "
                           "team_model middleware (graph() does)")

    def bind_tools(self, tools: Any, **kw: Any) -> Any:
        return self  # the team model binds the tools on each call


@wrap_model_call
async def team_model(request: ModelRequest[RunContext],
                     handler: Callable[[ModelRequest[RunContext]], Awaitable[ModelResponse]]
                     ) -> ModelResponse:
    """Every model call goes to the run's team model (from its runtime context)."""
    return await handler(request.override(model=run_team_model(request.runtime)))


def graph() -> Any:
    return create_agent(RunModel(), TOOLS, system_prompt=INSTRUCTIONS,
                        middleware=[team_model], context_schema=RunContext)
