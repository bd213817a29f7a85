"""RegistryState: the platform's desired prefixes, outside every engine replica.

Pure Python (the Ray actor in ``hub.py`` wraps it). Each LLM replica reconciles its
engine with this state (``sync.py``), so a replica that restarts, or one that never saw
a registration, pins the same prefixes.

Prefix ids are scoped by team. A team names its prefixes with its own ids (``red-doc``,
the API's), and the registry and the engines hold them as ``<team>/<id>``
(``scoped_id``; team names and the API's ids have no ``/``), so two teams may use the
same id and neither can reach the other's: a lookup is always in the caller's own
scope, and another team's prefix is as absent as an unknown one (404,
``PrefixNotFound``).

HOT budgets (``granikv_engine.hot_budget``): with a team's budget given, ``put`` and
``set_context`` refuse a pin that would take the team's pinned prefixes (context and
variants included) past it (409, ``PrefixQuotaExceeded``); unpinned prefixes are not
counted here (an engine places them within the team's budget, or COLD). Deciding here,
once for every replica, keeps the replicas agreeing on what is pinned.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Literal

from granikv_engine.prefix_registry import (
    PrefixConflict,
    PrefixNotFound,
    PrefixQuotaExceeded,
    content_hash,
)

# "variant": a team context preceded by what a chat template adds before it in some
# conversations (tools); its id is the context's + VARIANT_SEP + a digest, and it goes
# when its context goes.
Kind = Literal["prefix", "context", "variant"]
VARIANT_SEP = ":"  # allowed in prefix ids (schemas.PREFIX_ID_PATTERN)
SCOPE_SEP = "/"  # in neither team names (names.TEAM_RE) nor the API's prefix ids


def scoped_id(team: str, prefix_id: str) -> str:
    """The registry's and the engines' id of ``team``'s prefix ``prefix_id`` (an id
    already in ``team``'s scope is returned as it is)."""
    head = team + SCOPE_SEP
    return prefix_id if prefix_id.startswith(head) else head + prefix_id


def team_id(prefix_id: str) -> str:
    """The id a team sees of one of its scoped ids (``red/doc`` -> ``doc``)."""
    return prefix_id.partition(SCOPE_SEP)[2] or prefix_id


def display_ids(records: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Scoped id -> the id to show the operator, for (scoped id, team) pairs: the team's
    own id, or the scoped one where two teams use the same id."""
    pairs = list(records)
    teams: dict[str, set[str]] = {}
    for pid, team in pairs:
        teams.setdefault(team_id(pid), set()).add(team)
    return {pid: team_id(pid) if len(teams[team_id(pid)]) == 1 else pid for pid, _ in pairs}


def variant_id(context_id: str, token_ids: tuple[int, ...]) -> str:
    return f"{context_id}{VARIANT_SEP}{content_hash(token_ids)[:12]}"


def variants_of(context_id: str, specs: dict[str, PrefixSpec]) -> list[str]:
    """The ids of ``context_id``'s variants among ``specs`` (a prefix of another kind
    with a lookalike id is not one)."""
    head = context_id + VARIANT_SEP
    return [p for p, s in specs.items() if s.kind == "variant" and p.startswith(head)]


@dataclass(frozen=True)
class PrefixSpec:
    """One prefix every replica should hold: ``kind`` "context" is a team's shared
    context (``text`` is the system message it was rendered from). ``prefix_id`` is
    always scoped (``scoped_id``): a team's own id given here is scoped by ``team``."""

    prefix_id: str
    team: str
    token_ids: tuple[int, ...]
    pin: bool = True
    kind: Kind = "prefix"
    text: str | None = None
    source: Literal["api", "config"] = "api"
    created_at: float = field(default_factory=time.time)

    def __post_init__(self) -> None:
        object.__setattr__(self, "prefix_id", scoped_id(self.team, self.prefix_id))

    @property
    def team_id(self) -> str:
        """The id its team sees (the API's)."""
        return team_id(self.prefix_id)

    @cached_property
    def content_hash(self) -> str:  # computed once: the replicas' sync compares it often
        return content_hash(self.token_ids)

    @property
    def length(self) -> int:
        return len(self.token_ids)


class RegistryState:
    """Prefix specs by id, each team's current context, and a version that grows on
    every change (replicas skip reconciling when it did not move)."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path else None
        self.version = 0
        self.specs: dict[str, PrefixSpec] = {}
        self.contexts: dict[str, str] = {}  # team -> prefix id of its context
        if self.path is not None and self.path.exists():
            self._load()

    # ---- reads ---------------------------------------------------------------------
    def get(self, prefix_id: str, team: str) -> PrefixSpec:
        """``team``'s prefix (its own id or the scoped one); PrefixNotFound otherwise,
        whether another team has a prefix of that id or none does."""
        spec = self.specs.get(scoped_id(team, prefix_id))
        if spec is None or spec.team != team:
            raise PrefixNotFound(f"no prefix {team_id(scoped_id(team, prefix_id))!r}")
        return spec

    def list_specs(self, team: str | None = None) -> list[PrefixSpec]:
        return [s for s in self.specs.values() if team is None or s.team == team]

    def context(self, team: str) -> PrefixSpec | None:
        pid = self.contexts.get(team)
        return self.specs.get(pid) if pid else None

    def pinned_tokens(self, team: str, without: Iterable[str] = ()) -> int:
        """Tokens of ``team``'s pinned prefixes, but for the ids ``without``."""
        skip = set(without)
        return sum(s.length for s in self.specs.values()
                   if s.team == team and s.pin and s.prefix_id not in skip)

    def snapshot(self, known_version: int = -1) -> tuple[int, list[PrefixSpec] | None]:
        """(version, specs), or (version, None) when ``known_version`` is current."""
        if known_version == self.version:
            return self.version, None
        return self.version, list(self.specs.values())

    # ---- writes --------------------------------------------------------------------
    def put(self, spec: PrefixSpec, budget: int | None = None) -> tuple[PrefixSpec, bool]:
        """Add a prefix; returns (spec, created). The same id with the same tokens is
        idempotent (its pin may change); other tokens under a taken id are a conflict.
        ``budget``: the team's HOT budget, which its pins may not exceed."""
        old = self.specs.get(spec.prefix_id)  # in spec.team's scope
        if old is not None:
            if old.token_ids != spec.token_ids:
                raise PrefixConflict(f"prefix id {spec.team_id!r} holds other tokens; "
                                     "delete it first")
            if old.pin == spec.pin and old.kind == spec.kind:
                return old, False
        self._check_budget(spec, budget, {spec.prefix_id})
        self.specs[spec.prefix_id] = spec
        self._changed()
        return spec, old is None

    def delete(self, prefix_id: str, team: str) -> PrefixSpec:
        spec = self.get(prefix_id, team)
        del self.specs[spec.prefix_id]
        if self.contexts.get(team) == spec.prefix_id:
            del self.contexts[team]
        self._drop_variants(spec.prefix_id)
        self._changed()
        return spec

    def set_context(self, spec: PrefixSpec, budget: int | None = None) -> str | None:
        """Make ``spec`` its team's context; returns the replaced context's id, if any.
        ``budget``: as ``put``'s; what the replaced context and its variants pin is
        given back first."""
        if spec.kind != "context":
            raise ValueError("a team context needs kind='context'")
        old = self.context(spec.team)
        gone = {spec.prefix_id}
        if old is not None:
            gone |= {old.prefix_id, *variants_of(old.prefix_id, self.specs)}
        self._check_budget(spec, budget, gone)
        self.put(spec)
        self.contexts[spec.team] = spec.prefix_id
        if old is not None and old.prefix_id != spec.prefix_id:
            del self.specs[old.prefix_id]
            self._drop_variants(old.prefix_id)
        self._changed()
        return old.prefix_id if old is not None and old.prefix_id != spec.prefix_id else None

    def _check_budget(self, spec: PrefixSpec, budget: int | None, gone: set[str]) -> None:
        if budget is None or not spec.pin:
            return
        held = self.pinned_tokens(spec.team, gone)
        if held + spec.length > budget:
            what = {"context": "a team context", "variant": "a context variant"}.get(
                spec.kind, "a pinned prefix")
            raise PrefixQuotaExceeded(
                f"team {spec.team!r}: HOT budget of {budget} tokens exceeded (teams[]."
                f"hot_slots, else granikv.team_hot_slots or an equal share of the HOT "
                f"arena): it pins {held} tokens, and {what} of {spec.length} tokens "
                f"would take it to {held + spec.length}; delete or unpin one of its "
                "prefixes, or register this one with pin: false")

    def _drop_variants(self, context_id: str) -> None:
        for pid in variants_of(context_id, self.specs):
            del self.specs[pid]

    # ---- persistence ---------------------------------------------------------------
    def _changed(self) -> None:
        self.version += 1
        if self.path is not None:
            self._save()

    def _save(self) -> None:
        assert self.path is not None
        data = {"version": self.version, "contexts": self.contexts,
                "specs": [asdict(s) for s in self.specs.values()]}
        tmp = self.path.with_suffix(".tmp")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(data))
        os.replace(tmp, self.path)  # atomic: a crash leaves the old or the new file

    def _load(self) -> None:
        """A file written before ids were scoped holds the teams' own ids: they are
        scoped as they load, and the file is rewritten at a new version (replicas then
        re-register them under the scoped ids and drop the old ones)."""
        assert self.path is not None
        data = json.loads(self.path.read_text())
        self.version = int(data["version"])
        self.contexts = {team: scoped_id(team, pid) for team, pid in data["contexts"].items()}
        self.specs = {}
        for raw in data["specs"]:
            raw["token_ids"] = tuple(raw["token_ids"])
            spec = PrefixSpec(**raw)
            self.specs[spec.prefix_id] = spec
        if self.contexts != data["contexts"] or any(
                s["prefix_id"] not in self.specs for s in data["specs"]):
            self._changed()
