"""Whether a run's messages can fit the model, checked before the run is stored.

A run whose prompt is longer than the model takes fails in its first model call, after
its input was checkpointed: every later run on the thread would send that input again
and fail the same way. So ``create_run`` measures the run first, with the model's own
tokenizer and chat template (``ReplicaFit``: the LLM replica's ``tokenize``, through the
run service's handle) and refuses it (400, naming the limit) while nothing is stored.

What is measured (``prompt_messages``) is a lower bound of the first model call's
prompt: the team's context (the system message the platform puts first), then the
thread's messages and the run's new ones, as ``TeamChatModel`` sends them (a team with
a built-in shape sends its task, the last message, instead of the conversation), with
the generation prompt; plus the fewest output tokens an agent of the team asks for. What
a graph adds at run time (an agent's role, tool schemas, a shape's prompts) is not
counted, so a refused run could never have run, and a run within a few dozen tokens of
the limit may still fail when it runs.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from langchain_core.messages import BaseMessage, HumanMessage, convert_to_messages

from granikv_agents.chat_model import conversation, roles_and_texts
from granikv_agents.team import Team
from granikv_platform.protocol import ErrorItem, JsonItem

logger = logging.getLogger(__name__)
Messages = list[dict[str, str]]  # OpenAI chat messages: role, content


class PromptFit(Protocol):
    async def problem(self, team: Team, messages: Messages) -> str | None:
        """Why ``messages`` (``prompt_messages``) cannot fit the model; None if they
        may."""
        ...


def new_messages(kwargs: Mapping[str, Any]) -> list[BaseMessage]:
    """The messages a run adds: its input's, then its command's update's (checked by
    ``options.run_kwargs`` already, so they convert)."""
    found: list[BaseMessage] = []
    for values in (kwargs.get("input"), (kwargs.get("command") or {}).get("update")):
        msgs = (values or {}).get("messages") if isinstance(values, Mapping) else None
        if msgs is not None:
            found += convert_to_messages(msgs if isinstance(msgs, list) else [msgs])
    return found


def prompt_messages(team: Team, history: Sequence[BaseMessage],
                    new: Sequence[BaseMessage]) -> Messages:
    """The least the run's first model call sends (see the module's docstring)."""
    said = [*history, *new]
    if team.graph is None:  # a built-in shape: the task is the last message, or the spec's
        said = said[-1:] or [HumanMessage(team.task)]
    head = [{"role": "system", "content": team.context}] if team.context else []
    return head + [{"role": role, "content": text}
                   for role, text in roles_and_texts(conversation(said))]


def least_output(team: Team) -> int:
    """The fewest output tokens a model call of the team asks for."""
    return min((a.sampling.max_tokens for a in team.agents), default=team.limits.max_tokens)


def length_problem(prompt: int, output: int, max_model_len: int,
                   max_prompt_tokens: int | None) -> str | None:
    """Why ``prompt`` tokens with ``output`` more do not fit (the limit named)."""
    what = ("the team's context, the thread's messages and this run's input come to "
            f"{prompt} prompt tokens")
    if max_prompt_tokens is not None and prompt > max_prompt_tokens:
        return (f"{what}, over this platform's limit ({max_prompt_tokens}, "
                "limits.max_prompt_tokens): shorten the input or start a new thread")
    if prompt + output > max_model_len:
        return (f"{what}; with the {output} output tokens the team's agents ask for, "
                f"{prompt + output} tokens exceed the model's max_model_len "
                f"({max_model_len}): shorten the input or start a new thread")
    return None


class ReplicaFit:
    """``PromptFit`` by the LLM replica's tokenizer and chat template (its ``tokenize``
    method, ``vllm serve``'s ``/tokenize``, which also says ``max_model_len``). ``llm``:
    the run service's handle to the replicas (duck-typed, ``.tokenize.remote``)."""

    def __init__(self, llm: Any, model: str, max_prompt_tokens: int | None) -> None:
        self._llm = llm
        self.model = model
        self.max_prompt_tokens = max_prompt_tokens

    async def problem(self, team: Team, messages: Messages) -> str | None:
        try:
            item = await self._llm.tokenize.remote({"model": self.model, "messages": messages,
                                                    "add_generation_prompt": True})
        except Exception:  # a replica restarting: the run's own call will say it
            logger.warning("GraniKV: a thread run's length could not be checked",
                           exc_info=True)
            return None
        if isinstance(item, ErrorItem) or not isinstance(item, JsonItem):
            logger.warning("GraniKV: a thread run's length could not be checked: %s", item)
            return None
        return length_problem(int(item.body["count"]), least_output(team),
                              int(item.body["max_model_len"]), self.max_prompt_tokens)
