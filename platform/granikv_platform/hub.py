"""The registry hub: a detached Ray actor holding ``RegistryState`` and the replicas'
latest stats reports.

It lives outside the LLM replicas (and outside the app's lifetime: ``lifetime=
"detached"``), so a restarted replica finds its teams' prefixes there and pins them
again; with ``registry.state_path`` it also survives its own restart. Every LLM replica
reaches it by name with ``hub_client``.
"""

from __future__ import annotations

import time
from typing import Any

import ray
from ray.exceptions import RayTaskError

from granikv_engine.prefix_registry import PrefixError
from granikv_platform.registry import PrefixSpec, RegistryState
from granikv_platform.request_path import ControlPlaneCalls


@ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=3)
class RegistryHub:
    def __init__(self, state_path: str | None = None) -> None:
        self.state = RegistryState(state_path)
        self.reports: dict[str, dict[str, Any]] = {}  # replica id -> latest report

    # ---- prefixes (errors are granikv_engine PrefixError subclasses) ---------------
    def get(self, prefix_id: str, team: str) -> PrefixSpec:
        return self.state.get(prefix_id, team)

    def list_specs(self, team: str | None = None) -> list[PrefixSpec]:
        return self.state.list_specs(team)

    def put(self, spec: PrefixSpec, budget: int | None = None) -> tuple[PrefixSpec, bool]:
        return self.state.put(spec, budget)

    def delete(self, prefix_id: str, team: str) -> PrefixSpec:
        return self.state.delete(prefix_id, team)

    def context(self, team: str) -> PrefixSpec | None:
        return self.state.context(team)

    def set_context(self, spec: PrefixSpec, budget: int | None = None) -> str | None:
        return self.state.set_context(spec, budget)

    def snapshot(self, known_version: int = -1) -> tuple[int, list[PrefixSpec] | None]:
        return self.state.snapshot(known_version)

    # ---- replica reports -------------------------------------------------------------
    def report(self, replica_id: str, stats: dict[str, Any]) -> None:
        self.reports[replica_id] = {**stats, "reported_at": time.time()}

    def forget(self, replica_id: str) -> None:
        self.reports.pop(replica_id, None)

    def live_reports(self, max_age_s: float) -> dict[str, dict[str, Any]]:
        """Reports younger than ``max_age_s``: a dead replica stops reporting."""
        now = time.time()
        return {r: s for r, s in self.reports.items() if now - s["reported_at"] <= max_age_s}


def hub_client(name: str, namespace: str, state_path: str | None = None,
               calls: ControlPlaneCalls | None = None) -> HubClient:
    """The app's hub, created on first use (``get_if_exists`` makes racing creators
    share one actor). ``calls`` counts the calls made on a request path."""
    return HubClient(RegistryHub.options(  # type: ignore[attr-defined]
        name=name, namespace=namespace, lifetime="detached", get_if_exists=True,
    ).remote(state_path), calls or ControlPlaneCalls())


class HubClient:
    """Async calls on the hub actor; a registry error (PrefixError) comes out as itself,
    not wrapped in Ray's RayTaskError."""

    def __init__(self, actor: Any, calls: ControlPlaneCalls) -> None:
        self.actor = actor
        self.calls = calls

    async def _call(self, method: str, *args: Any) -> Any:
        self.calls.count_hub()
        try:
            return await getattr(self.actor, method).remote(*args)
        except RayTaskError as e:
            if isinstance(e.cause, PrefixError):
                raise e.cause from None
            raise

    async def get(self, prefix_id: str, team: str) -> PrefixSpec:
        return await self._call("get", prefix_id, team)  # type: ignore[no-any-return]

    async def list_specs(self, team: str | None = None) -> list[PrefixSpec]:
        return await self._call("list_specs", team)  # type: ignore[no-any-return]

    async def put(self, spec: PrefixSpec, budget: int | None = None
                  ) -> tuple[PrefixSpec, bool]:
        """``budget``: the team's HOT budget (``RegistryState.put``)."""
        return await self._call("put", spec, budget)  # type: ignore[no-any-return]

    async def delete(self, prefix_id: str, team: str) -> PrefixSpec:
        return await self._call("delete", prefix_id, team)  # type: ignore[no-any-return]

    async def context(self, team: str) -> PrefixSpec | None:
        return await self._call("context", team)  # type: ignore[no-any-return]

    async def set_context(self, spec: PrefixSpec, budget: int | None = None) -> str | None:
        return await self._call("set_context", spec, budget)  # type: ignore[no-any-return]

    async def snapshot(self, known_version: int) -> tuple[int, list[PrefixSpec] | None]:
        return await self._call("snapshot", known_version)  # type: ignore[no-any-return]

    async def report(self, replica_id: str, stats: dict[str, Any]) -> None:
        await self._call("report", replica_id, stats)

    async def forget(self, replica_id: str) -> None:
        await self._call("forget", replica_id)

    async def live_reports(self, max_age_s: float) -> dict[str, dict[str, Any]]:
        return await self._call("live_reports", max_age_s)  # type: ignore[no-any-return]
