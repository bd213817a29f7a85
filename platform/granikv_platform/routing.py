"""How Serve picks an LLM replica for a request: its power of two choices, and a bounded
wait for a replica that takes it.

Serve routes to the LLM replicas with this class wherever a caller holds their handle:
in its HTTP proxy (the replicas are the app's ingress) and in the services that call
them (the agents' run executor). Serve's own router holds a request until a replica
takes it, however long that is: when every replica is restarting, a minute or more
(an engine's start-up). Here a request that no replica has taken within
``replica_wait_s`` (every replica down or restarting, or all of them at
``max_ongoing_requests``) fails with ``NoReplica``, a ``BackPressureError``: Serve's proxy
answers it as it answers a full queue (``max_queued_requests``), 503 with
``Retry-After``, and a handle caller gets it raised.

Ray internals used (Ray 2.60): Serve's default router class from its private module,
and its ``_choose_replica_for_request``, which Ray's own experimental
``CapacityQueueRouter`` overrides as well; ``PendingRequest.created_at`` (a request that
a replica turned away is routed again, and its wait counts from its first try).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from ray.serve._private.request_router.pow_2_router import PowerOfTwoChoicesRequestRouter
from ray.serve.exceptions import BackPressureError
from ray.serve.request_router import PendingRequest, RunningReplica

ROUTER_CLASS = "granikv_platform.routing:ReplicaRouter"


class NoReplica(BackPressureError):
    """No LLM replica took the request in time: Serve answers 503 with Retry-After."""

    def __init__(self, waited_s: float, retry_after_s: float = 1.0) -> None:
        super().__init__(0, -1, 503, retry_after_s)
        self.waited_s = waited_s
        self._message = (f"no LLM replica took the request within {waited_s:g} s (all "
                         "restarting or busy); retry shortly")

    def __reduce__(self) -> tuple[Any, ...]:
        return NoReplica, (self.waited_s, self.retry_after_s)


class ReplicaRouter(PowerOfTwoChoicesRequestRouter):
    replica_wait_s = 10.0
    retry_after_s = 1.0

    def initialize_state(self, replica_wait_s: float = 10.0, retry_after_s: float = 1.0,
                         **kwargs: Any) -> None:
        """``request_router_kwargs`` of the deployment's ``request_router_config``."""
        super().initialize_state(**kwargs)
        self.replica_wait_s = float(replica_wait_s)
        self.retry_after_s = float(retry_after_s)

    async def _choose_replica_for_request(self, pending_request: PendingRequest, *,
                                          is_retry: bool = False) -> RunningReplica:
        left = self.replica_wait_s - (time.time() - pending_request.created_at)
        try:
            if left <= 0:
                raise TimeoutError
            async with asyncio.timeout(left):
                return await super()._choose_replica_for_request(pending_request,
                                                                 is_retry=is_retry)
        except TimeoutError:
            raise NoReplica(self.replica_wait_s, self.retry_after_s) from None
