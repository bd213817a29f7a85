"""ServeTeamBackend: the platform inside the Ray cluster, through a Serve deployment
handle to its LLM replicas (``granikv_platform.replica.LLMReplica``), no HTTP hop.

It does what the team route ``/teams/{team}/v1/chat/completions`` does: the context's
text first, as a system message, and the request bound (``vllm_xargs``) to the team and
its context's prefix id; the replica checks both against the registry before the
request is admitted. The handle is duck-typed (``.method.remote()``), so this module
imports no Ray: anything the handle raises (a replica that died, a timeout) is a
``TransientLLMError``; error items are mapped by HTTP status.
"""

from __future__ import annotations

import asyncio
from typing import Any

from granikv_agents.binding import (
    LLMCallError,
    Reply,
    TransientLLMError,
    TurnRequest,
    context_pin,
    status_error,
)
from granikv_agents.state import ContextPin
from granikv_platform.identity import bind_body


class ServeTeamBackend:
    def __init__(self, llm: Any, team: str, model: str, *, timeout_s: float = 300.0) -> None:
        self.team = team
        self.model = model
        self.timeout_s = timeout_s
        self._llm = llm
        self._stream = llm.options(stream=True)  # chat/completions are generator methods
        self._texts: dict[str, str] = {}  # prefix id -> the context text it was made of

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
        text = await self._text(context["prefix_id"])
        body = bind_body({
            "model": self.model, "max_tokens": request.sampling.max_tokens,
            "temperature": request.sampling.temperature, "seed": request.sampling.seed,
            "messages": [{"role": "system", "content": text}, *request.dicts()],
        }, self.team, context["prefix_id"])
        out = await self._first(body)
        usage = out.get("usage") or {}
        return Reply(text=out["choices"][0]["message"]["content"] or "",
                     prompt_tokens=int(usage.get("prompt_tokens", 0)),
                     completion_tokens=int(usage.get("completion_tokens", 0)))

    async def aclose(self) -> None:
        return None

    # ---- internals ------------------------------------------------------------------
    async def _text(self, prefix_id: str) -> str:
        if prefix_id not in self._texts:
            current = await self._context()
            if current is None or current["prefix_id"] != prefix_id:
                raise LLMCallError(409, f"team {self.team!r}: its context changed during "
                                   f"the run (was {prefix_id!r})")
            self._texts[prefix_id] = str(current["text"])
        return self._texts[prefix_id]

    async def _context(self) -> dict[str, Any] | None:
        try:
            return await self._call("get_team_context", self.team)
        except LLMCallError as e:
            if e.status == 404 and "has no context" in e.message:
                return None
            raise

    async def _call(self, method: str, *args: Any) -> dict[str, Any]:
        try:
            async with asyncio.timeout(self.timeout_s):
                item = await getattr(self._llm, method).remote(*args)
        except Exception as e:  # the replica died or is restarting, or a timeout
            raise TransientLLMError(503, f"{type(e).__name__}: {e}") from e
        return _unwrap(item)

    async def _first(self, body: dict[str, Any]) -> dict[str, Any]:
        try:
            async with asyncio.timeout(self.timeout_s):
                items = [item async for item in self._stream.chat.remote(body)]
        except Exception as e:
            raise TransientLLMError(503, f"{type(e).__name__}: {e}") from e
        if not items:
            raise TransientLLMError(502, "the replica answered nothing")
        return _unwrap(items[0])


def _unwrap(item: dict[str, Any]) -> dict[str, Any]:
    """A replica's protocol item -> its JSON body, or the matching error."""
    if "error" in item:
        err = item["error"]
        raise status_error(int(err["status"]), str(err["message"]))
    if "json" not in item:
        raise LLMCallError(500, f"expected one JSON answer, got {sorted(item)}")
    return item["json"]  # type: ignore[no-any-return]
