"""PrefixSync: keep one engine's prefixes equal to the registry's desired state, and a
local view of both so that a bound request costs no control-plane call.

- ``reconcile()`` runs every ``sync_period_s`` and at start-up: it registers what the
  registry has and the engine lacks (evicted or never seen) and unregisters what the
  registry dropped. This is how a restarted replica re-pins its teams' prefixes, and how
  a registration made through one replica reaches the others. It refreshes the local
  view: the registry's specs at its version, and the engine's prefix records.
- ``ensure(team, prefix_id)`` runs before every bound request. A prefix that the local
  view has, of that team, held by the engine as desired, returns at once: no registry
  call, no engine call. Anything else (an unknown id, a prefix the engine lacks) takes
  the slow path: the registry is the authority (404 for an id the team does not have),
  and a prefix the engine lacks is registered before the request is admitted. Whatever
  replica Serve picks therefore holds the prefix when the request runs, so routing
  needs no team affinity. A prefix deleted through another replica is
  still served here until the next reconcile (at most ``sync_period_s`` later).
- Ids given here are a team's own or already scoped (``registry.scoped_id``); the local
  view and the engine hold scoped ones only, so a team never reaches another's.
- ``add`` / ``remove`` / ``set_context`` change the registry and this engine together,
  and the local view with them; a new registration the engine fails to take is rolled
  back out of the registry. With ``budgets`` (this engine's, ``hot_budget.TeamBudgets``)
  the registry refuses a pin past the team's HOT budget; a pinned prefix the engine
  still holds COLD (placed before another replica's delete of the team's reached this
  one) is registered again by the reconcile that brings a newer registry version.
One lock makes each of these atomic on a replica, so a reconcile that fetched an older
snapshot never undoes a newer registration made through the same replica.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from granikv_engine.hot_budget import TeamBudgets
from granikv_platform.registry import PrefixSpec, scoped_id, variants_of

logger = logging.getLogger("ray.serve")


class Engine(Protocol):
    async def list_prefixes(self) -> list[dict[str, Any]]: ...
    async def register(self, spec: PrefixSpec) -> dict[str, Any]: ...
    async def unregister(self, prefix_id: str, team: str) -> dict[str, Any]: ...
    async def set_pin(self, prefix_id: str, team: str, pin: bool) -> dict[str, Any]: ...


class Hub(Protocol):
    async def get(self, prefix_id: str, team: str) -> PrefixSpec: ...
    async def context(self, team: str) -> PrefixSpec | None: ...
    async def put(self, spec: PrefixSpec, budget: int | None = None
                  ) -> tuple[PrefixSpec, bool]: ...
    async def delete(self, prefix_id: str, team: str) -> PrefixSpec: ...
    async def set_context(self, spec: PrefixSpec, budget: int | None = None
                          ) -> str | None: ...
    async def snapshot(self, known_version: int) -> tuple[int, list[PrefixSpec] | None]: ...


@dataclass(frozen=True)
class SyncPlan:
    register: tuple[PrefixSpec, ...] = ()
    unregister: tuple[tuple[str, str], ...] = ()  # (prefix id, team)
    pins: tuple[PrefixSpec, ...] = ()  # held with the wrong pin state

    @property
    def empty(self) -> bool:
        return not (self.register or self.unregister or self.pins)


def plan(desired: Iterable[PrefixSpec], engine_records: Iterable[dict[str, Any]],
         retry_cold: bool = False) -> SyncPlan:
    """What to change so that the engine holds exactly ``desired`` (id, team, tokens,
    pin); ``retry_cold``: also register again the pinned ones it holds COLD."""
    want = {s.prefix_id: s for s in desired}
    have = {r["prefix_id"]: r for r in engine_records}

    def same(pid: str) -> bool:
        s, r = want[pid], have[pid]
        return s.team == r["team"] and s.content_hash == r["content_hash"]

    stale = tuple((pid, r["team"]) for pid, r in have.items() if pid not in want or not same(pid))
    register = tuple(s for pid, s in want.items() if pid not in have or not same(pid) or (
        retry_cold and s.pin and have[pid].get("state") == "cold"))
    pins = tuple(s for pid, s in want.items()
                 if pid in have and same(pid) and bool(have[pid]["pinned"]) != s.pin)
    return SyncPlan(register, stale, pins)


@dataclass
class BindCounters:
    """How bound requests were checked: ``fast`` from the local view, ``slow`` through
    the registry and the engine."""

    fast: int = 0
    slow: int = 0


class PrefixSync:
    def __init__(self, engine: Engine, hub: Hub, budgets: TeamBudgets | None = None) -> None:
        self.engine = engine
        self.hub = hub
        self.budgets = budgets
        self.lock = asyncio.Lock()
        self.version = -1  # registry version this engine last matched
        self.applied = 0  # engine changes made (for stats)
        self.binds = BindCounters()
        # The local view. specs: the registry's, at ``version``, plus this replica's own
        # changes since. records: the engine's prefix records, by id.
        self.specs: dict[str, PrefixSpec] = {}
        self.records: dict[str, dict[str, Any]] = {}

    async def reconcile(self, force: bool = False) -> SyncPlan:
        async with self.lock:
            version, specs = await self.hub.snapshot(-1 if force else self.version)
            if specs is not None:
                self.specs = {s.prefix_id: s for s in specs}
            self.records = {r["prefix_id"]: r for r in await self.engine.list_prefixes()}
            todo = plan(self.specs.values(), self.records.values(),
                        retry_cold=specs is not None and self.budgets is not None)
            await self._apply(todo)
            self.version = version
            return todo

    async def ensure(self, team: str, prefix_id: str, fresh: bool = False) -> PrefixSpec:
        """Raises the registry's PrefixNotFound. ``fresh`` asks the registry even when
        the local view has the prefix (the prefix API's reads, which must see a delete
        made through another replica at once)."""
        prefix_id = scoped_id(team, prefix_id)
        spec = self.specs.get(prefix_id)
        if not fresh and spec is not None and spec.team == team and self._held(spec):
            self.binds.fast += 1
            return spec
        self.binds.slow += 1
        spec = await self.hub.get(prefix_id, team)
        async with self.lock:  # plan under the lock: another task may have done it
            self.specs[prefix_id] = spec
            await self._apply(plan([spec], await self._records(prefix_id)))
        return spec

    def context(self, team: str) -> PrefixSpec | None:
        """The team's context in the local view (None: none known here)."""
        for spec in self.specs.values():
            if spec.kind == "context" and spec.team == team:
                return spec
        return None

    async def fetch_context(self, team: str, expect: str | None = None) -> PrefixSpec | None:
        """The team's context: the local view's, else the registry's (a miss). With
        ``expect`` (the context a caller pinned), a local view that differs asks the
        registry too: the view may be older than a context set through another
        replica."""
        spec = self.context(team)
        if spec is None or (expect is not None and spec.prefix_id != scoped_id(team, expect)):
            spec = await self.hub.context(team)
            if spec is not None:
                for old in [s for s in self.specs.values()
                            if s.kind == "context" and s.team == team]:
                    del self.specs[old.prefix_id]  # replaced meanwhile
                self.specs[spec.prefix_id] = spec
        return spec

    async def ensure_variant(self, spec: PrefixSpec) -> tuple[str, str]:
        """A context variant (``registry.variant_id``) held here, and its state in the
        engine: from the local view when it is held (no call), else registered (the
        registry, then this engine)."""
        known = self.specs.get(spec.prefix_id)
        if known is None or not self._held(known):
            self.binds.slow += 1
            await self.add(spec)
        else:
            self.binds.fast += 1
        return spec.prefix_id, str(self.records.get(spec.prefix_id, {}).get("state", "unknown"))

    async def engine_state(self, prefix_id: str) -> str:
        """The prefix's state in this engine ("ready", "filling", ..., "absent"): the
        local view's when it says READY (no call), else asked of the engine, since a
        fill in progress ends between two reconciles."""
        rec = self.records.get(prefix_id)
        if rec is None or rec.get("state") != "ready":
            found = await self._records(prefix_id)
            rec = found[0] if found else None
        return "absent" if rec is None else str(rec.get("state", "unknown"))

    def _held(self, spec: PrefixSpec) -> bool:
        rec = self.records.get(spec.prefix_id)
        return rec is not None and plan([spec], [rec]).empty

    async def add(self, spec: PrefixSpec) -> bool:
        """Registry first (it decides conflicts), then this engine. Returns created.
        A new entry that this engine fails to take is removed from the registry again
        before the error goes on: a registration that failed does not exist."""
        async with self.lock:
            spec, created = await (self.hub.put(spec) if self.budgets is None else
                                   self.hub.put(spec, self.budgets.of(spec.team)))
            self.specs[spec.prefix_id] = spec
            try:
                await self._apply(plan([spec], await self._records(spec.prefix_id)))
            except Exception:
                if created:
                    await self._roll_back(spec)
                raise
            return created

    async def remove(self, prefix_id: str, team: str) -> PrefixSpec:
        async with self.lock:
            spec = await self.hub.delete(prefix_id, team)
            self.specs.pop(spec.prefix_id, None)
            await self._apply(plan([], await self._records(spec.prefix_id)))
            return spec

    async def set_context(self, spec: PrefixSpec) -> None:
        async with self.lock:
            old = await (self.hub.set_context(spec) if self.budgets is None else
                         self.hub.set_context(spec, self.budgets.of(spec.team)))
            # the old context and its variants: the registry dropped them together
            gone = {old, *variants_of(old, self.specs)} if old is not None else set()
            for pid in gone:
                self.specs.pop(pid, None)
            self.specs[spec.prefix_id] = spec
            ids = {spec.prefix_id, *gone}
            records = [r for r in await self.engine.list_prefixes() if r["prefix_id"] in ids]
            await self._apply(plan([spec], records))

    async def _roll_back(self, spec: PrefixSpec) -> None:
        self.specs.pop(spec.prefix_id, None)
        try:
            await self.hub.delete(spec.prefix_id, spec.team)
            await self._apply(plan([], await self._records(spec.prefix_id)))
        except Exception:  # the engine is down: its next reconcile drops the entry
            logger.exception("GraniKV: rolling back prefix %s", spec.prefix_id)

    async def _records(self, prefix_id: str) -> list[dict[str, Any]]:
        records = [r for r in await self.engine.list_prefixes() if r["prefix_id"] == prefix_id]
        self.records.pop(prefix_id, None)
        self.records.update((r["prefix_id"], r) for r in records)
        return records

    async def _apply(self, todo: SyncPlan) -> None:
        """Make the engine changes of ``todo``; the local records follow each answer."""
        for pid, team in todo.unregister:
            self.records.pop(pid, None)
            await self.engine.unregister(pid, team)
        for spec in todo.register:
            self._remember(await self.engine.register(spec))
        for spec in todo.pins:
            self._remember(await self.engine.set_pin(spec.prefix_id, spec.team, spec.pin))
        self.applied += len(todo.register) + len(todo.unregister) + len(todo.pins)

    def _remember(self, record: dict[str, Any]) -> None:
        if isinstance(record, dict) and "prefix_id" in record:
            self.records[record["prefix_id"]] = record
