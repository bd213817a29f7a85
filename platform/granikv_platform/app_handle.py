"""A handle to another deployment of the same application, found by name where it is
used.

The LLM replicas are the app's ingress and hold the handles of the ``config.services``
(their routes reach the agents' run executor); a service calls the LLM replicas in turn.
Serve binds handles along the application's graph, which has no cycles, so a service
gets this in place of a bound handle: it looks the deployment up in the replica that
uses it (``serve.get_deployment_handle``, in the replica's own application) on first
use, and then answers as that handle does (``.options(...)``, ``.method.remote(...)``).
"""

from __future__ import annotations

from typing import Any

from ray import serve
from ray.serve.handle import DeploymentHandle


class AppHandle:
    def __init__(self, deployment: str) -> None:
        self.deployment = deployment
        self._handle: DeploymentHandle | None = None

    def handle(self) -> DeploymentHandle:
        if self._handle is None:
            app = serve.get_replica_context().app_name
            self._handle = serve.get_deployment_handle(self.deployment, app)
        return self._handle

    def options(self, **kwargs: Any) -> DeploymentHandle:
        return self.handle().options(**kwargs)

    def __getattr__(self, name: str) -> Any:  # a deployment method: handle.method.remote()
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.handle(), name)

    def __getstate__(self) -> dict[str, Any]:  # what travels: the name, not a handle
        return {"deployment": self.deployment}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.deployment = state["deployment"]
        self._handle = None
