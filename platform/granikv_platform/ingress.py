"""Ingress: the HTTP front of a GraniKV app (FastAPI through ``@serve.ingress``).

The FastAPI app is built inside the ingress replica (``__serve_build_asgi_app__``) from
the config, so per-team routes and extra routers (``config.extra_routers`` /
``team_routers``, e.g. the agents' ``/teams/{team}/runs``) are imported there. Route
functions reach this object through ``current_ingress`` (``deps.py``), and the
``config.services`` deployments through ``services[name]`` (Serve handles).

A replica (or service) that died or is restarting is a 503 with ``Retry-After``
(errors.py), never a 500: clients and the agents' retry policy try again, and Serve
routes them to a live replica. A replica lost in the middle of a stream ends the stream
with an inline OpenAI-shaped error. A request that no LLM replica takes within
``ingress.replica_wait_s`` (every replica down or restarting, or all of them full) is a
503 as well: Serve's router would hold it until a replica comes back.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import FastAPI
from ray.serve.exceptions import BackPressureError, DeploymentUnavailableError
from ray.serve.handle import DeploymentHandle
from starlette.responses import Response

from granikv_platform.answers import stream_answer
from granikv_platform.app import create_app
from granikv_platform.config import PlatformConfig
from granikv_platform.errors import ApiError, unavailable
from granikv_platform.hub import HubClient, hub_client
from granikv_platform.protocol import Item


class Ingress:
    def __init__(self, llm: DeploymentHandle, config: dict[str, Any],
                 services: dict[str, DeploymentHandle] | None = None) -> None:
        self.cfg = PlatformConfig.model_validate(config)
        self.llm = llm
        self.services: dict[str, DeploymentHandle] = dict(services or {})
        self._stream = llm.options(stream=True)
        self.hub: HubClient = hub_client(self.cfg.registry_name, self.cfg.registry.namespace,
                                         self.cfg.registry.state_path)

    def __serve_build_asgi_app__(self) -> FastAPI:
        return create_app(self.cfg)

    async def call(self, method: str, *args: Any) -> Item:
        """A unary LLMReplica method (Serve picks the replica)."""
        try:
            response = getattr(self.llm, method).remote(*args)
            await self._assigned(response)
            async with asyncio.timeout(self.cfg.ingress.request_timeout_s):
                return await response  # type: ignore[no-any-return]
        except _SERVE_HANDLED as e:  # a full queue or no replica: 503, Retry-After
            raise unavailable(e) from e

    async def openai(self, method: str, *args: Any) -> Response:
        """Run a chat/completions method of a replica: one JSON answer, or an SSE
        stream (``answers.stream_answer``)."""
        gen = getattr(self._stream, method).remote(*args)
        try:
            await self._assigned(gen)
            return await stream_answer(gen, self.cfg.ingress.request_timeout_s)
        except _SERVE_HANDLED as e:  # a full queue or no replica: 503, Retry-After
            raise unavailable(e) from e

    async def _assigned(self, response: Any) -> None:
        """Until Serve's router has given ``response`` (a handle call) to a replica; a
        503 with Retry-After when none takes it within ``ingress.replica_wait_s``.
        ``_fetch_future_result_async`` is the assignment step every await of a Serve
        response goes through first (Ray 2.60's ``ray.serve.handle``)."""
        wait_s = self.cfg.ingress.replica_wait_s
        try:
            async with asyncio.timeout(wait_s):
                await response._fetch_future_result_async()
        except TimeoutError:
            response.cancel()
            raise ApiError(503, f"no LLM replica took the request within {wait_s:g} s "
                           "(all restarting or busy); retry shortly",
                           retry_after_s=max(1, round(wait_s))) from None

    async def reports(self) -> dict[str, dict[str, Any]]:
        """Latest stats of the live replicas (those that reported recently)."""
        max_age = 3 * self.cfg.replicas.sync_period_s + 5.0
        return await self.hub.live_reports(max_age)


# Serve installs its own handlers for these on the ingress app (replacing the app's:
# a plain 503 without Retry-After); raised as ApiError they get the app's OpenAI-shaped
# 503 with Retry-After.
_SERVE_HANDLED = (BackPressureError, DeploymentUnavailableError)
