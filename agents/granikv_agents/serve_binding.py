"""ServeTeamBackend: the platform inside the Ray cluster, through a Serve deployment
handle to its LLM replicas (``granikv_platform.replica.LLMReplica``), no HTTP hop.

Its turns call what the team route ``/teams/{team}/v1/chat/completions`` calls,
``LLMReplica.team_chat``: the replica puts the team's context first (its tokens, not
its text) and binds the request to the context's HOT prefix, and answers 409 if the
team's context is no longer the one this run pinned. The handle is duck-typed
(``.method.remote()``), so this module imports no Ray: anything the handle raises (a
replica that died, a timeout) is a ``TransientLLMError``; error items are mapped by
HTTP status.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from granikv_agents.binding import (
    Delta,
    LLMCallError,
    Reply,
    TransientLLMError,
    TurnRequest,
    context_pin,
    sse_deltas,
    status_error,
)
from granikv_agents.state import ContextPin
from granikv_platform.protocol import NO_TEAM_CONTEXT, ErrorItem, Item, JsonItem, SseItem


class ServeTeamBackend:
    def __init__(self, llm: Any, team: str, model: str, *, timeout_s: float = 300.0) -> None:
        self.team = team
        self.model = model
        self.timeout_s = timeout_s
        self._llm = llm
        self._stream = llm.options(stream=True)  # chat/completions are generator methods

    async def pin_context(self, text: str) -> ContextPin:
        current = await self._context()
        if current is not None and current.get("text") == text and current["pinned"]:
            return context_pin(current, reused=True)
        record = await self._call("set_team_context", self.team, text)
        return context_pin(record, reused=False)

    async def read_context(self) -> ContextPin | None:
        record = await self._context()
        return None if record is None else context_pin(record, reused=True)

    async def chat(self, request: TurnRequest, context: ContextPin) -> Reply:
        return Reply.of(await self._first(request.body(self.model), context["prefix_id"]))

    async def stream(self, request: TurnRequest, context: ContextPin) -> AsyncIterator[Delta]:
        body = request.body(self.model, stream=True)
        try:
            async with asyncio.timeout(self.timeout_s):
                async for item in self._stream.team_chat.remote(self.team, body,
                                                                context["prefix_id"]):
                    if not isinstance(item, SseItem):
                        _unwrap(item)  # an error item raises; anything else is one
                        raise LLMCallError(500, "expected a stream, got one answer")
                    for delta in sse_deltas(item.text.splitlines()):
                        yield delta
        except LLMCallError:
            raise
        except Exception as e:  # the replica died or is restarting, or a timeout
            raise TransientLLMError(503, f"{type(e).__name__}: {e}") from e

    async def aclose(self) -> None:
        return None

    # ---- internals ------------------------------------------------------------------
    async def _context(self) -> dict[str, Any] | None:
        try:
            async with asyncio.timeout(self.timeout_s):
                item = await self._llm.get_team_context.remote(self.team)
        except Exception as e:  # the replica died or is restarting, or a timeout
            raise TransientLLMError(503, f"{type(e).__name__}: {e}") from e
        if isinstance(item, ErrorItem) and item.type == NO_TEAM_CONTEXT:
            return None
        return _unwrap(item)

    async def _call(self, method: str, *args: Any) -> dict[str, Any]:
        try:
            async with asyncio.timeout(self.timeout_s):
                item = await getattr(self._llm, method).remote(*args)
        except Exception as e:  # the replica died or is restarting, or a timeout
            raise TransientLLMError(503, f"{type(e).__name__}: {e}") from e
        return _unwrap(item)

    async def _first(self, body: dict[str, Any], context_id: str) -> dict[str, Any]:
        """The replica's team chat (LLMReplica.team_chat: the context prepended and the
        request bound in the replica, a 409 if the team's context is no longer
        ``context_id``)."""
        try:
            async with asyncio.timeout(self.timeout_s):
                items = [item async for item in
                         self._stream.team_chat.remote(self.team, body, context_id)]
        except Exception as e:
            raise TransientLLMError(503, f"{type(e).__name__}: {e}") from e
        if not items:
            raise TransientLLMError(502, "the replica answered nothing")
        return _unwrap(items[0])


def _unwrap(item: Item) -> dict[str, Any]:
    """A replica's protocol item -> its JSON body, or the matching error."""
    if isinstance(item, ErrorItem):
        raise status_error(item.status, item.message)
    if not isinstance(item, JsonItem):
        raise LLMCallError(500, f"expected one JSON answer, got {type(item).__name__}")
    return item.body  # type: ignore[no-any-return]
