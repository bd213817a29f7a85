"""RegistryState: the platform's desired prefixes, outside every engine replica.

Pure Python (the Ray actor in ``hub.py`` wraps it). Each LLM replica reconciles its
engine with this state (``sync.py``), so a replica that restarts, or one that never saw
a registration, pins the same prefixes. Team scoping follows the engine's registry:
another team's prefix id is 403 (``PrefixAccessDenied``), an unknown one 404.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Literal

from granikv_engine.prefix_registry import (
    PrefixAccessDenied,
    PrefixConflict,
    PrefixNotFound,
    content_hash,
)

# "variant": a team context preceded by what a chat template adds before it in some
# conversations (tools); its id is the context's + VARIANT_SEP + a digest, and it goes
# when its context goes.
Kind = Literal["prefix", "context", "variant"]
VARIANT_SEP = ":"  # allowed in prefix ids (schemas.PREFIX_ID_PATTERN)


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
    context (``text`` is the system message it was rendered from)."""

    prefix_id: str
    team: str
    token_ids: tuple[int, ...]
    pin: bool = True
    kind: Kind = "prefix"
    text: str | None = None
    source: Literal["api", "config"] = "api"
    created_at: float = field(default_factory=time.time)

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
        spec = self.specs.get(prefix_id)
        if spec is None:
            raise PrefixNotFound(f"no prefix {prefix_id!r}")
        if spec.team != team:
            raise PrefixAccessDenied(f"prefix {prefix_id!r} belongs to another team")
        return spec

    def list_specs(self, team: str | None = None) -> list[PrefixSpec]:
        return [s for s in self.specs.values() if team is None or s.team == team]

    def context(self, team: str) -> PrefixSpec | None:
        pid = self.contexts.get(team)
        return self.specs.get(pid) if pid else None

    def snapshot(self, known_version: int = -1) -> tuple[int, list[PrefixSpec] | None]:
        """(version, specs), or (version, None) when ``known_version`` is current."""
        if known_version == self.version:
            return self.version, None
        return self.version, list(self.specs.values())

    # ---- writes --------------------------------------------------------------------
    def put(self, spec: PrefixSpec) -> tuple[PrefixSpec, bool]:
        """Add a prefix; returns (spec, created). The same id with the same tokens is
        idempotent (its pin may change); other tokens under a taken id are a conflict."""
        old = self.specs.get(spec.prefix_id)
        if old is not None:
            if old.team != spec.team:
                raise PrefixAccessDenied(f"prefix id {spec.prefix_id!r} belongs to another team")
            if old.token_ids != spec.token_ids:
                raise PrefixConflict(f"prefix id {spec.prefix_id!r} holds other tokens; "
                                     "delete it first")
            if old.pin == spec.pin and old.kind == spec.kind:
                return old, False
        self.specs[spec.prefix_id] = spec
        self._changed()
        return spec, old is None

    def delete(self, prefix_id: str, team: str) -> PrefixSpec:
        spec = self.get(prefix_id, team)
        del self.specs[prefix_id]
        if self.contexts.get(team) == prefix_id:
            del self.contexts[team]
        self._drop_variants(prefix_id)
        self._changed()
        return spec

    def set_context(self, spec: PrefixSpec) -> str | None:
        """Make ``spec`` its team's context; returns the replaced context's id, if any."""
        if spec.kind != "context":
            raise ValueError("a team context needs kind='context'")
        old = self.context(spec.team)
        self.put(spec)
        self.contexts[spec.team] = spec.prefix_id
        if old is not None and old.prefix_id != spec.prefix_id:
            del self.specs[old.prefix_id]
            self._drop_variants(old.prefix_id)
        self._changed()
        return old.prefix_id if old is not None and old.prefix_id != spec.prefix_id else None

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
        assert self.path is not None
        data = json.loads(self.path.read_text())
        self.version = int(data["version"])
        self.contexts = dict(data["contexts"])
        self.specs = {}
        for raw in data["specs"]:
            raw["token_ids"] = tuple(raw["token_ids"])
            spec = PrefixSpec(**raw)
            self.specs[spec.prefix_id] = spec
