"""PrefixRegistry: prefix id <-> tokens (hash) <-> HOT range, owned by a team.

A registered prefix is READY once its K/V sits in the HOT pool, FILLING while the
registering request's prefill writes it, and COLD when it did not fit (requests naming it
are then served from ordinary paged storage). The registry owns the HOT pool's keys: a
prefix's HOT entry is keyed by its id.

Registering an id again with other tokens *replaces* it: the id names the new tokens
from then on (placed and filled like any registration), while the old record is
*retired*: its HOT entry moves to a key of its own, the requests reading it finish on it,
and its slots are released with its last reader. Readers and fills therefore hold the
record they started with (``acquire`` returns it; ``release``, ``mark_ready`` and
``abort_fill`` take it), never just the id.

*Implicit* prefixes are the engine's own: a prompt head that several requests shared,
promoted to HOT under a generated id (``promote``) within a budget of slots of their
own. They are READY from the start (the engine copies their K/V from the COLD blocks
that hold it before any reader runs), unpinned, evicted least recently used first by
other implicit prefixes and by registrations, and dropped when evicted. A team that
registers the same tokens adopts its implicit prefix: the record takes the given id.

With ``budgets`` (``hot_budget.TeamBudgets``) every team holds at most its budget of
HOT slots (all its entries, implicit ones included), and a placement evicts only the
placing team's own entries, or those of a team over its budget: one team never takes
another's slots. A registration that does not fit its team's budget is COLD.
"""

from __future__ import annotations

import builtins
import enum
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from granikv_engine.hot_budget import TeamBudgets
from granikv_engine.hot_pool import AllocResult, HotPool, Move, SlotRange


class PrefixError(Exception):
    """Base of registry errors; ``status`` is the HTTP-like code an API edge may use."""

    status = 400


class PrefixNotFound(PrefixError, KeyError):
    status = 404


class PrefixAccessDenied(PrefixError, PermissionError):
    status = 403


class PrefixConflict(PrefixError, ValueError):
    status = 409


class PrefixQuotaExceeded(PrefixError):
    """A pin that would take its team past its HOT budget."""

    status = 409


class PrefixState(enum.StrEnum):
    FILLING = "filling"
    READY = "ready"
    COLD = "cold"  # not in the HOT pool: did not fit, or was evicted


def content_hash(tokens: Sequence[int]) -> str:
    h = hashlib.sha256()
    h.update(len(tokens).to_bytes(8, "little"))
    for t in tokens:
        h.update(int(t).to_bytes(4, "little", signed=False))
    return h.hexdigest()


def default_prefix_id(team: str, tokens: Sequence[int]) -> str:
    return f"{team}-{content_hash(tokens)[:16]}"


def implicit_prefix_id(team: str, tokens: Sequence[int]) -> str:
    return f"implicit-{team}-{content_hash(tokens)[:16]}"


@dataclass
class PrefixRecord:
    prefix_id: str
    team: str
    tokens: tuple[int, ...]
    content_hash: str
    state: PrefixState
    hot: SlotRange | None = None
    pinned: bool = False
    doomed: bool = False  # unregistered while in use: dropped on its last release
    hits: int = 0
    # The HOT pool's key for this record: its id, or a key of its own once retired.
    key: object = None
    implicit: bool = False  # promoted by the engine, not registered
    # The engine's hashes of the prefix's blocks, recorded when it filled (None: not
    # filled yet, or the engine does not hash); what a prompt that starts with the
    # prefix hashes to, so prefix-cache lookups of such prompts find its blocks.
    block_hashes: tuple[bytes, ...] | None = None

    def __post_init__(self) -> None:
        if self.key is None:
            self.key = self.prefix_id

    @property
    def length(self) -> int:
        return len(self.tokens)

    @property
    def retired(self) -> bool:
        return self.key != self.prefix_id


Ref = str | PrefixRecord  # a prefix id (its current record) or a record itself


class PrefixRegistry:
    """Registration, lookup (by id or by prompt), team scoping and HOT lifecycle."""

    def __init__(self, pool: HotPool, compact: bool = True,
                 budgets: TeamBudgets | None = None) -> None:
        self.pool = pool
        self.compact = compact  # compact a fragmented arena instead of falling back to COLD
        self.budgets = budgets  # None: any team may take the whole arena
        self._records: dict[str, PrefixRecord] = {}
        self._retired: dict[object, PrefixRecord] = {}  # replaced, still read: by key
        self.evictions = 0
        self.replacements = 0
        self.implicit_promotions = 0
        self.implicit_evictions = 0
        self.implicit_adoptions = 0
        self.cold_registrations = 0
        self.over_budget = 0  # registrations COLD because their team's budget was full
        self.compactions = 0
        self._moves: list[Move] = []  # K/V copies the engine still has to apply
        # Bumped by every change of a record's state, range, pin or membership, so that a
        # reader (the engine's seed table) rebuilds what it derives only when it changed.
        self.version = 0

    # ---- registration -------------------------------------------------------------
    def register(self, team: str, tokens: Sequence[int], prefix_id: str | None = None,
                 *, pin: bool = True) -> PrefixRecord:
        """Idempotent: the same team and tokens return the existing record. The same id
        with other tokens (or one being removed) replaces it (see the module's doc)."""
        if not team:
            raise PrefixError("team must be a non-empty string")
        if len(tokens) == 0:
            raise PrefixError("a prefix needs at least one token")
        toks = tuple(int(t) for t in tokens)
        pid = prefix_id or default_prefix_id(team, toks)
        old = self._records.get(pid)
        if old is not None:
            self.version += 1
            return self._reregister(old, team, toks, pin)
        implicit = self._records.get(implicit_prefix_id(team, toks))
        if implicit is not None and implicit.implicit and implicit.tokens == toks:
            return self._adopt(implicit, pid, pin)
        rec = PrefixRecord(pid, team, toks, content_hash(toks), PrefixState.COLD)
        self._records[pid] = rec
        self._place(rec, pin)
        self.version += 1
        return rec

    def mark_ready(self, ref: Ref) -> PrefixRecord | None:
        """The registering request's prefill wrote the whole prefix. Returns the record,
        or None when it was unregistered or replaced meanwhile (its slots are then
        released)."""
        rec = self._resolve(ref)
        if rec is None or rec.state is not PrefixState.FILLING:
            return rec
        if not rec.doomed:
            rec.state = PrefixState.READY
        self.version += 1
        self.release(rec)  # the fill's own reference; reaps a doomed record
        return None if rec.doomed else rec

    def abort_fill(self, ref: Ref) -> None:
        """The registering request died before its prefill finished: give the slots back."""
        rec = self._resolve(ref)
        if rec is None or rec.state is not PrefixState.FILLING:
            return
        doomed = rec.doomed
        self.version += 1
        self.release(rec)  # the fill's own reference
        if not doomed:
            self._drop_hot(rec)

    def peek(self, prefix_id: str) -> PrefixRecord | None:
        """The engine's raw view: also records being removed."""
        return self._records.get(prefix_id)

    def unregister(self, prefix_id: str, team: str) -> bool:
        """Forget a prefix. Returns True when its HOT slots were released now; False when
        requests still read them (released on the last ``release``)."""
        rec = self.get(prefix_id, team)
        self.version += 1
        freed = self._retire(rec)
        if freed:
            del self._records[prefix_id]
        return freed

    # ---- lookup -------------------------------------------------------------------
    def get(self, prefix_id: str, team: str | None) -> PrefixRecord:
        """``team=None`` is the engine's own view (no scoping)."""
        rec = self._records.get(prefix_id)
        if rec is None or rec.doomed:
            raise PrefixNotFound(f"no prefix {prefix_id!r}")
        if team is not None and rec.team != team:
            raise PrefixAccessDenied(f"prefix {prefix_id!r} belongs to another team")
        return rec

    def match(self, team: str, prompt: Sequence[int]) -> PrefixRecord | None:
        """The longest READY prefix of ``team`` that ``prompt`` starts with, verified
        token by token. A prefix equal to the whole prompt does not match: the engine
        must compute at least one token of a prompt."""
        best: PrefixRecord | None = None
        for rec in self._records.values():
            if rec.team != team or rec.state is not PrefixState.READY or rec.doomed:
                continue
            if rec.length >= len(prompt) or (best and best.length >= rec.length):
                continue
            if tuple(prompt[: rec.length]) == rec.tokens:
                best = rec
        return best

    def records(self, team: str | None = None) -> list[PrefixRecord]:
        return [r for r in self._records.values()
                if not r.doomed and (team is None or r.team == team)]

    # ---- pins and references ----------------------------------------------------
    def pin(self, prefix_id: str, team: str | None) -> PrefixRecord:
        rec = self.get(prefix_id, team)
        if rec.hot is not None and not rec.pinned:
            self.pool.pin(prefix_id)
        rec.pinned = True
        self.version += 1
        return rec

    def unpin(self, prefix_id: str, team: str | None) -> PrefixRecord:
        rec = self.get(prefix_id, team)
        if rec.hot is not None and rec.pinned:
            self.pool.unpin(prefix_id)
        rec.pinned = False
        self.version += 1
        return rec

    def acquire(self, prefix_id: str) -> SlotRange | None:
        """A request starts reading the prefix. None when it is not in the HOT pool.
        The reader releases the record it read (``get`` before, or ``peek``), which
        stays valid if the id is replaced meanwhile."""
        rec = self._get(prefix_id)
        rec.hits += 1
        if rec.state is not PrefixState.READY or rec.hot is None:
            return None
        return self.pool.acquire(rec.key)

    def release(self, ref: Ref) -> None:
        rec = self._resolve(ref)
        if rec is None or rec.key not in self.pool:
            return
        if self.pool.release(rec.key):
            self.version += 1
            rec.hot = None
            if rec.doomed:
                self._forget(rec)

    # ---- internals ----------------------------------------------------------------
    def _get(self, prefix_id: str) -> PrefixRecord:
        return self.get(prefix_id, None)

    def _reregister(self, rec: PrefixRecord, team: str, toks: tuple[int, ...],
                    pin: bool) -> PrefixRecord:
        if rec.team != team:
            raise PrefixAccessDenied(f"prefix id {rec.prefix_id!r} belongs to another team")
        if rec.tokens != toks or rec.doomed:
            return self._replace(rec, team, toks, pin)
        if rec.hot is None:
            self._place(rec, pin)
        elif pin:
            self.pin(rec.prefix_id, team)
        return rec

    def _replace(self, old: PrefixRecord, team: str, toks: tuple[int, ...],
                 pin: bool) -> PrefixRecord:
        """The id names ``toks`` from now on; ``old`` is retired (module doc)."""
        self.replacements += 1
        del self._records[old.prefix_id]
        if not old.doomed:
            self._retire(old)
        if old.hot is not None:  # still read (or filling): under a key of its own
            key = (old.prefix_id, "retired", self.replacements)
            self.pool.rename(old.key, key)
            old.key = key
            self._retired[key] = old
        rec = PrefixRecord(old.prefix_id, team, toks, content_hash(toks), PrefixState.COLD)
        self._records[rec.prefix_id] = rec
        self._place(rec, pin)
        return rec

    def _retire(self, rec: PrefixRecord) -> bool:
        """Unpin ``rec`` and free its slots, now (True) or with its last reader (False:
        it is then doomed)."""
        if rec.hot is None:
            return True
        if rec.pinned:
            rec.pinned = False
            self.pool.unpin(rec.key)
        if self.pool.free(rec.key):
            rec.hot, rec.state = None, PrefixState.COLD
            return True
        rec.doomed = True
        return False

    def _resolve(self, ref: Ref) -> PrefixRecord | None:
        return ref if isinstance(ref, PrefixRecord) else self._records.get(ref)

    def _forget(self, rec: PrefixRecord) -> None:
        if self._records.get(rec.prefix_id) is rec:
            del self._records[rec.prefix_id]
        else:
            self._retired.pop(rec.key, None)

    def promote(self, team: str, tokens: Sequence[int], budget: int) -> PrefixRecord | None:
        """A READY implicit prefix for ``tokens`` of ``team``, placed within ``budget``
        slots of implicit prefixes (evicting only implicit ones, least recently used
        first); None when it exists already (explicit or implicit) or does not fit.
        The caller writes its K/V into its range before any reader runs."""
        toks = tuple(int(t) for t in tokens)
        pid = implicit_prefix_id(team, toks)
        if not toks or pid in self._records or any(
                r.team == team and r.tokens == toks for r in self._records.values()):
            return None
        if len(toks) > budget:
            return None
        implicit = self._implicit_keys()
        mine = self._evictable_for(team)
        used = sum(self.pool.range_of(k).length for k in implicit)
        for victim in [k for k in self.pool.evictable() if k in implicit and mine(k)]:
            if used + len(toks) <= budget:
                break
            used -= self.pool.range_of(victim).length
            self.pool.evict(victim)
            self._on_evicted(str(victim))
        if used + len(toks) > budget or not self._room_in_budget(
                team, len(toks), self._implicit_keys().__contains__):
            return None
        implicit = self._implicit_keys()
        res = self.pool.allocate(pid, len(toks), may_evict=lambda k: k in implicit and mine(k))
        for victim in res.evicted:
            self._on_evicted(str(victim))
        if not res.ok:
            return None
        rec = PrefixRecord(pid, team, toks, content_hash(toks), PrefixState.READY,
                           hot=res.range, implicit=True)
        self._records[pid] = rec
        self.implicit_promotions += 1
        self.version += 1
        return rec

    def implicit_slots(self) -> int:
        return sum(self.pool.range_of(k).length for k in self._implicit_keys())

    def _implicit_keys(self) -> set[object]:
        return {r.key for r in self._records.values() if r.implicit and r.hot is not None}

    def _adopt(self, rec: PrefixRecord, pid: str, pin: bool) -> PrefixRecord:
        """A registration of an implicit prefix's tokens: the record becomes ``pid``."""
        del self._records[rec.prefix_id]
        if rec.hot is not None:
            self.pool.rename(rec.key, pid)
            if pin:
                self.pool.pin(pid)
        rec.prefix_id = rec.key = pid
        rec.implicit, rec.pinned = False, pin
        self._records[pid] = rec
        self.implicit_adoptions += 1
        self.version += 1
        return rec

    def take_moves(self) -> builtins.list[Move]:
        """Slot moves from compactions, in order; the engine copies the K/V before the
        next forward pass reads any slot."""
        moves, self._moves = self._moves, []
        return moves

    def _place(self, rec: PrefixRecord, pin: bool) -> AllocResult:
        if not self._room_in_budget(rec.team, rec.length):
            self.over_budget += 1
            res = AllocResult(None, (), "over_budget")
        else:
            res = self._allocate(rec.prefix_id, rec.length, self._evictable_for(rec.team))
        for victim in res.evicted:
            self._on_evicted(str(victim))
        if res.ok:
            rec.hot, rec.state = res.range, PrefixState.FILLING
            self.pool.acquire(rec.prefix_id)  # held by the fill until mark_ready
            if pin:
                self.pool.pin(rec.prefix_id)
        else:
            rec.hot, rec.state = None, PrefixState.COLD
            self.cold_registrations += 1
        rec.pinned = pin
        return res

    def _allocate(self, key: str, n: int, may_evict: Callable[[object], bool]
                  ) -> AllocResult:
        res = self.pool.allocate(key, n, may_evict=may_evict)
        if not res.ok and res.reason == "fragmented" and self.compact:
            self._moves.extend(self.apply_compaction())
            self.compactions += 1
            res = self.pool.allocate(key, n, may_evict=may_evict)
        return res

    # ---- team budgets (hot_budget.py) -----------------------------------------------
    def team_slots(self) -> dict[str, int]:
        """HOT slots each team holds (retired records still read included)."""
        used: dict[str, int] = {}
        for rec in [*self._records.values(), *self._retired.values()]:
            if rec.key in self.pool:
                used[rec.team] = used.get(rec.team, 0) + self.pool.range_of(rec.key).length
        return used

    def _owner(self, key: object) -> str | None:
        rec = self._records.get(key) if isinstance(key, str) else None
        rec = rec or self._retired.get(key)
        return rec.team if rec is not None else None

    def _evictable_for(self, team: str) -> Callable[[object], bool]:
        """Which entries a placement for ``team`` may evict: any without budgets; else
        the team's own and those of a team over its budget."""
        if self.budgets is None:
            return lambda key: True
        budgets = self.budgets
        over = {t for t, n in self.team_slots().items() if n > budgets.of(t)}
        ok = {team, *over}
        return lambda key: self._owner(key) in ok

    def _room_in_budget(self, team: str, n: int,
                        may_evict: Callable[[object], bool] | None = None) -> bool:
        """Whether ``n`` more slots fit ``team``'s budget, evicting the team's own
        evictable entries (``may_evict`` of them), least recently used first, as
        needed."""
        if self.budgets is None:
            return True
        budget = self.budgets.of(team)
        used = self.team_slots().get(team, 0)
        own = [k for k in self.pool.evictable()
               if self._owner(k) == team and (may_evict is None or may_evict(k))]
        if used - sum(self.pool.range_of(k).length for k in own) + n > budget:
            return False  # evicting would not make it fit: keep them
        for key in own:
            if used + n <= budget:
                break
            used -= self.pool.range_of(key).length
            self.pool.evict(key)
            self._on_evicted(str(key))
        return True

    def _drop_hot(self, rec: PrefixRecord) -> None:
        if rec.pinned and rec.hot is not None:
            self.pool.unpin(rec.key)
        if rec.key in self.pool:
            self.pool.free(rec.key)
        rec.hot, rec.state = None, PrefixState.COLD

    def _on_evicted(self, prefix_id: str) -> None:
        self.evictions += 1
        self.version += 1
        rec = self._records.get(prefix_id)
        if rec is not None:
            rec.hot, rec.state = None, PrefixState.COLD
            if rec.implicit:  # nobody named it: it goes
                del self._records[prefix_id]
                self.implicit_evictions += 1

    def apply_compaction(self) -> builtins.list[Move]:
        """Compact the pool (only unreferenced prefixes move) and update the moved
        records' ranges."""
        moves = self.pool.compact()
        self.version += 1
        for rec in [*self._records.values(), *self._retired.values()]:
            if rec.hot is not None and rec.key in self.pool:
                rec.hot = self.pool.range_of(rec.key)
        return moves
