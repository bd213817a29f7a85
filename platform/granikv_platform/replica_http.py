"""The LLM replica as the application's HTTP ingress: its FastAPI app, and what the routes
use of the replica that serves them (``IngressApi``), in this process.

Serve builds the app in each replica (``__serve_build_asgi_app__``, after the engine has
started) and serves it there: behind its Python proxy, one batched hop per group of
stream chunks; under direct ingress (HAProxy), from the replica's own HTTP server, with
no hop. A chat's chunks go from vLLM's serving objects to the response in this process:
no handle call per request or per chunk. The routes call the replica's methods as local
coroutines (``call``, ``openai``); the agents' routes reach ``config.services`` through
their handles (``services``), and stats come from the registry hub (``reports``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI
from ray.serve.handle import DeploymentHandle
from starlette.responses import Response

from granikv_platform.answers import stream_answer
from granikv_platform.app import create_app
from granikv_platform.config import PlatformConfig
from granikv_platform.hub import HubClient
from granikv_platform.protocol import Item


class ReplicaHttp:
    """Mixed into ``LLMReplica``; ``_items`` gives a chat or completion's unbatched
    items (``LLMReplica._items``)."""

    cfg: PlatformConfig
    hub: HubClient
    services: dict[str, DeploymentHandle]
    replica_id: str

    def __serve_build_asgi_app__(self) -> FastAPI:
        return create_app(self.cfg, replica=self.replica_id)

    def _items(self, method: str, *args: Any) -> AsyncIterator[Item]:
        raise NotImplementedError

    async def call(self, method: str, *args: Any) -> Item:
        """A unary method of this replica (a prefix or context route)."""
        async with asyncio.timeout(self.cfg.replicas.request_timeout_s):
            return await getattr(self, method)(*args)  # type: ignore[no-any-return]

    async def openai(self, method: str, *args: Any) -> Response:
        """A chat or completion of this replica (``chat``, ``completions``,
        ``team_chat``): one JSON answer, or an SSE stream."""
        return await stream_answer(self._items(method, *args),
                                   self.cfg.replicas.request_timeout_s)

    async def reports(self) -> dict[str, dict[str, Any]]:
        """Latest stats of the live replicas (those that reported recently)."""
        max_age = 3 * self.cfg.replicas.sync_period_s + 5.0
        return await self.hub.live_reports(max_age)
