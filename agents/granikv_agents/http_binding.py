"""HttpTeamBackend: the platform over HTTP, for agents outside the Ray cluster.

Agent turns go through LangChain's ``ChatOpenAI`` at the team's OpenAI root
``{url}/teams/{team}/v1``: the platform puts the team context first as a system message
and binds the request to the team's HOT prefix, so the client needs no ``extra_body``.
A turn with tools posts the same route's OpenAI body directly (``TurnRequest.body``).
The context is set and read with ``PUT/GET {url}/teams/{team}/context``; every turn names
the context its run pinned (``X-GraniKV-Context``), so a replica whose view of the team
lags behind never serves it with another context. Every call
carries the team's API key (``Authorization: Bearer``; ChatOpenAI's ``api_key``) and the
team header, which must agree with the key. Retries are the graph's (``max_retries=0``
here), so every attempt is visible to it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import openai
from langchain_openai import ChatOpenAI
from pydantic import SecretStr

from granikv_agents.binding import (
    Delta,
    Reply,
    TransientLLMError,
    TurnRequest,
    context_pin,
    sse_deltas,
    status_error,
)
from granikv_agents.state import ContextPin
from granikv_agents.team import Sampling
from granikv_platform.names import CONTEXT_HEADER, TEAM_HEADER
from granikv_platform.protocol import NO_TEAM_CONTEXT


class HttpTeamBackend:
    def __init__(self, base_url: str, team: str, *, api_key: str | None = None,
                 model: str | None = None, timeout_s: float = 300.0) -> None:
        """``api_key``: the team's key (None only for a platform with ``auth: none``)."""
        self.team = team
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self._model = model
        self._api_key = api_key
        headers = {TEAM_HEADER: team}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        self._http = httpx.AsyncClient(base_url=self.base_url, headers=headers,
                                       timeout=timeout_s)
        # ChatOpenAI's own clients: ours, not LangChain's process-wide cached one, which
        # stays bound to the first event loop that used it.
        self._openai_http = httpx.AsyncClient(timeout=timeout_s)
        self._llms: dict[Sampling, ChatOpenAI] = {}  # one client per sampling setting

    async def pin_context(self, text: str) -> ContextPin:
        current = await self._context()
        if current is not None and current.get("text") == text and current["pinned"]:
            return context_pin(current, reused=True)
        put = await self._request("PUT", f"/teams/{self.team}/context", json={"text": text})
        return context_pin(put, reused=False)

    async def read_context(self) -> ContextPin | None:
        record = await self._context()
        return None if record is None else context_pin(record, reused=True)

    async def chat(self, request: TurnRequest, context: ContextPin) -> Reply:
        if request.tools or request.chat or request.extra_body:
            return await self._chat_body(request, context)
        llm = await self._llm(request.sampling)
        try:
            msg = await llm.ainvoke([(d["role"], d["content"]) for d in request.dicts()],
                                    extra_headers=_expects(context))
        except openai.APIConnectionError as e:  # includes timeouts
            raise TransientLLMError(503, f"{type(e).__name__}: {e}") from e
        except openai.APIStatusError as e:
            raise status_error(e.status_code, _message(e)) from e
        usage = msg.usage_metadata or {"input_tokens": 0, "output_tokens": 0}
        return Reply(text=str(msg.content), prompt_tokens=int(usage["input_tokens"]),
                     completion_tokens=int(usage["output_tokens"]))

    async def stream(self, request: TurnRequest, context: ContextPin) -> AsyncIterator[Delta]:
        body = request.body(await self.model(), stream=True)
        path = f"/teams/{self.team}/v1/chat/completions"
        try:
            async with self._http.stream("POST", path, json=body,
                                         headers=_expects(context)) as r:
                if r.status_code >= 400:
                    await r.aread()
                    raise status_error(r.status_code, _body_message(r))
                async for line in r.aiter_lines():
                    for delta in sse_deltas([line]):
                        yield delta
        except httpx.TransportError as e:
            raise TransientLLMError(503, f"{type(e).__name__}: {e}") from e

    async def aclose(self) -> None:
        await self._http.aclose()
        await self._openai_http.aclose()

    # ---- internals ------------------------------------------------------------------
    async def _chat_body(self, request: TurnRequest, context: ContextPin) -> Reply:
        """A turn with tools (or tool results, or more request fields): the team route's
        OpenAI body as it is, the tool calls as the server parsed them."""
        return Reply.of(await self._request(
            "POST", f"/teams/{self.team}/v1/chat/completions",
            json=request.body(await self.model()), headers=_expects(context)))

    async def _llm(self, s: Sampling) -> ChatOpenAI:
        if s not in self._llms:
            self._llms[s] = ChatOpenAI(  # type: ignore[call-arg]
                base_url=f"{self.base_url}/teams/{self.team}/v1",
                api_key=SecretStr(self._api_key or "none"), model=await self.model(),
                max_tokens=s.max_tokens, temperature=s.temperature, seed=s.seed,
                max_retries=0, timeout=self.timeout_s, http_async_client=self._openai_http,
                default_headers={TEAM_HEADER: self.team})
        return self._llms[s]

    async def model(self) -> str:
        """The served model's id, read from the team's OpenAI root once."""
        if self._model is None:
            models = await self._request("GET", f"/teams/{self.team}/v1/models")
            self._model = str(models["data"][0]["id"])
        return self._model

    async def _context(self) -> dict[str, Any] | None:
        try:
            r = await self._http.request("GET", f"/teams/{self.team}/context")
        except httpx.TransportError as e:
            raise TransientLLMError(503, f"{type(e).__name__}: {e}") from e
        if r.status_code == 404 and _body_type(r) == NO_TEAM_CONTEXT:
            return None
        if r.status_code >= 400:
            raise status_error(r.status_code, _body_message(r))
        return r.json()  # type: ignore[no-any-return]

    async def _request(self, method: str, path: str, **kw: Any) -> dict[str, Any]:
        try:
            r = await self._http.request(method, path, **kw)
        except httpx.TransportError as e:
            raise TransientLLMError(503, f"{type(e).__name__}: {e}") from e
        if r.status_code >= 400:
            raise status_error(r.status_code, _body_message(r))
        return r.json()  # type: ignore[no-any-return]


def _expects(context: ContextPin) -> dict[str, str]:
    """The context the run pinned: a replica that knows another one asks the registry,
    and a context replaced meanwhile is a 409 (not a turn served with another context)."""
    return {CONTEXT_HEADER: context["prefix_id"]}


def _body_type(r: httpx.Response) -> str | None:
    try:
        return str(r.json()["error"]["type"])
    except (ValueError, KeyError, TypeError):
        return None


def _body_message(r: httpx.Response) -> str:
    try:
        return str(r.json()["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return r.text[:500]


def _message(e: openai.APIStatusError) -> str:
    body = e.body if isinstance(e.body, dict) else {}
    err = body.get("error", body) if isinstance(body, dict) else {}
    return str(err.get("message", e.message)) if isinstance(err, dict) else e.message
