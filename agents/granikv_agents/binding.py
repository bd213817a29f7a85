"""The one small interface between the graph and the platform: ``TeamBackend``.

Two implementations: ``http_binding.HttpTeamBackend`` (outside the cluster: LangChain's
``ChatOpenAI`` at the team's OpenAI root, httpx for the context) and
``serve_binding.ServeTeamBackend`` (inside it: a Serve deployment handle to the LLM
replicas). Both raise ``TransientLLMError`` for what a retry can fix (a replica
restarting, a timeout, a 5xx) and ``LLMCallError`` for the rest (4xx): the graph's
retry policy retries only the first.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Protocol

from granikv_agents.state import ContextPin
from granikv_agents.team import Sampling

_TRANSIENT_STATUS = {408, 429, 500, 502, 503, 504}


class LLMCallError(Exception):
    """The platform refused or failed a call for good (a retry would fail the same)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message


class TransientLLMError(LLMCallError):
    """A call that may succeed when retried: a replica restarting, a timeout, a 5xx."""


def status_error(status: int, message: str) -> LLMCallError:
    cls = TransientLLMError if status in _TRANSIENT_STATUS or status >= 500 else LLMCallError
    return cls(status, message)


def is_transient(exc: BaseException) -> bool:
    """``retry_on`` of the graph's LLM nodes."""
    return isinstance(exc, TransientLLMError)


@dataclass(frozen=True)
class TurnRequest:
    agent: str
    round: int
    kind: str
    messages: tuple[tuple[str, str], ...]  # (role, content); the shared context not included
    sampling: Sampling
    # With tools: the conversation as OpenAI chat messages (assistant tool calls, tool
    # results with their call ids), roles already folded; ``messages`` is then unused.
    chat: tuple[dict[str, Any], ...] = ()
    tools: tuple[dict[str, Any], ...] = ()  # OpenAI function tools
    tool_choice: Any = None  # OpenAI's: "auto", "none", "required" or a named function
    extra_body: dict[str, Any] | None = None  # more of vLLM's request fields

    def dicts(self) -> list[dict[str, Any]]:
        """The chat messages, roles folded in (``fold_roles``)."""
        if self.chat:
            return [dict(m) for m in self.chat]
        return [{"role": r, "content": c} for r, c in fold_roles(self.messages)]

    def body(self, model: str, stream: bool = False) -> dict[str, Any]:
        """The chat completions request body of this turn (the context not included)."""
        s = self.sampling
        body: dict[str, Any] = {"model": model, "max_tokens": s.max_tokens,
                                "temperature": s.temperature, "seed": s.seed,
                                "messages": self.dicts()}
        if self.tools:
            body["tools"] = list(self.tools)
            if self.tool_choice is not None:
                body["tool_choice"] = self.tool_choice
        if stream:
            body.update(stream=True, stream_options={"include_usage": True})
        return {**(self.extra_body or {}), **body}


def fold_roles(messages: tuple[tuple[str, str], ...]) -> list[tuple[str, str]]:
    """The messages with their system messages (agent roles) folded into the first user
    message, ``Instructions:`` first: the platform's shared context is the one system
    message, at the start, that every chat template accepts."""
    rules = [c for r, c in messages if r == "system"]
    rest = [(r, c) for r, c in messages if r != "system"]
    if not rules:
        return rest
    head = "Instructions: " + "\n".join(rules)
    for i, (r, c) in enumerate(rest):
        if r == "user":
            return [*rest[:i], ("user", f"{head}\n\n{c}"), *rest[i + 1:]]
    return [("user", head), *rest]


@dataclass(frozen=True)
class Reply:
    text: str
    prompt_tokens: int  # as the engine counted them: shared context + own messages
    completion_tokens: int
    tool_calls: tuple[dict[str, Any], ...] = ()  # OpenAI's: {id, type, function{name, arguments}}

    @classmethod
    def of(cls, completion: dict[str, Any]) -> Reply:
        """The reply in an OpenAI chat completion (its first choice)."""
        usage = completion.get("usage") or {}
        message = completion["choices"][0]["message"]
        return cls(text=message.get("content") or "",
                   prompt_tokens=int(usage.get("prompt_tokens", 0)),
                   completion_tokens=int(usage.get("completion_tokens", 0)),
                   tool_calls=tuple(message.get("tool_calls") or ()))


@dataclass(frozen=True)
class Delta:
    """A piece of a streamed turn: text (maybe empty), and, on the last piece, the token
    counts (``usage`` set)."""

    text: str
    usage: tuple[int, int] | None = None  # (prompt_tokens, completion_tokens)


def sse_deltas(lines: Any) -> list[Delta]:
    """The deltas of some SSE lines of an OpenAI chat stream (``data: {...}``; others,
    ``data: [DONE]`` included, are skipped). A line with an ``error`` raises it."""
    out = []
    for line in lines:
        if not line.startswith("data: {"):
            continue
        chunk = json.loads(line[6:])
        if "error" in chunk:
            err = chunk["error"]
            raise status_error(int(err.get("code") or 500), str(err.get("message")))
        text = "".join((c.get("delta") or {}).get("content") or ""
                       for c in chunk.get("choices") or ())
        u = chunk.get("usage")
        usage = (int(u.get("prompt_tokens", 0)), int(u.get("completion_tokens", 0))) if u else None
        if text or usage:
            out.append(Delta(text, usage))
    return out


class TeamBackend(Protocol):
    """The platform as one team's agents use it."""

    team: str

    async def pin_context(self, text: str) -> ContextPin:
        """Make ``text`` the team's context, pinned as its HOT prefix, and read it back.
        Idempotent: the same text already pinned is reused (``reused=True``)."""
        ...

    async def read_context(self) -> ContextPin | None:
        """The team's current context as the platform reports it (None: none set)."""
        ...

    async def chat(self, request: TurnRequest, context: ContextPin) -> Reply:
        """One agent turn: the shared context first (bound to ``context``'s HOT
        prefix), then the request's own messages."""
        ...

    def stream(self, request: TurnRequest, context: ContextPin) -> AsyncIterator[Delta]:
        """``chat``, streamed: the reply's text as it is generated, the token counts on
        the last delta. Tools are not streamed (use ``chat``)."""
        ...

    async def aclose(self) -> None: ...


def context_pin(record: dict[str, Any], reused: bool) -> ContextPin:
    """A ContextPin from the platform's team context record (GET/PUT /context)."""
    return ContextPin(prefix_id=str(record["prefix_id"]), length=int(record["length"]),
                      state=str(record["state"]), pinned=bool(record["pinned"]),
                      hot_start=record.get("hot_start"), reused=reused)
