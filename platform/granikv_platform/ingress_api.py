"""IngressApi: what a route may use of the LLM replica that serves it (its config, the
prefix hub, its own methods and the named services).

Routes and deps.py depend on this Protocol, not on replica.py: the replica builds its
FastAPI app from the routes (``replica_http.py``), so naming its class here would make
a cycle.
"""

from __future__ import annotations

from typing import Any, Protocol

from ray.serve.handle import DeploymentHandle
from starlette.responses import Response

from granikv_platform.config import PlatformConfig
from granikv_platform.hub import HubClient
from granikv_platform.protocol import Item


class IngressApi(Protocol):
    cfg: PlatformConfig
    hub: HubClient
    services: dict[str, DeploymentHandle]  # config.services by name, e.g. the agents'

    async def call(self, method: str, *args: Any) -> Item:
        """A unary method of the replica serving the request."""
        ...

    async def openai(self, method: str, *args: Any) -> Response:
        """A chat/completions method of the replica serving the request (chat,
        completions, team_chat): one JSON answer, or an SSE stream."""
        ...

    async def reports(self) -> dict[str, dict[str, Any]]:
        """Latest stats of the live replicas, by replica id."""
        ...
