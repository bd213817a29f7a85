"""Hypothesis state machines over the engine's HOT bookkeeping: ``HotPool`` and
``PrefixRegistry`` (granikv_engine), driven the way the vLLM plugin drives them.

Each rule is checked against an independent model (first fit, LRU eviction, pin and
reference counts, deferred free, compaction moves applied to a simulated K/V cache), and
after every step the invariants are checked: ranges disjoint and inside the arena, the
pool's keys exactly the registry's placed prefixes, counts equal to the model's, content
intact where the pool says it is (also under requests reading it while the prefix is
unpinned or unregistered). Every run ends by draining: finishing all requests, all fills,
freeing / unregistering everything; the arena must then be empty (no leaked slot, no
leaked pin). The steps tried are counted into the figures file (figures.py).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any, ClassVar

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    rule,
)

from granikv_engine.hot_pool import HotPool, SlotRange
from granikv_engine.prefix_registry import (
    PrefixAccessDenied,
    PrefixConflict,
    PrefixNotFound,
    PrefixRecord,
    PrefixRegistry,
    PrefixState,
)
from tests.reliability.figures import record


@pytest.fixture(scope="module", autouse=True)
def _figures() -> Any:
    """After this module's machines ran: how many runs and steps they tried."""
    yield
    if COUNTS:
        record("engine_properties", examples_per_machine=RUNS.max_examples,
               max_steps_per_example=RUNS.stateful_step_count, **COUNTS)


RUNS = settings(max_examples=150, stateful_step_count=60, deadline=None,
                suppress_health_check=[HealthCheck.too_slow])
COUNTS: dict[str, dict[str, int]] = {}


def _count(machine: str, what: str, n: int = 1) -> None:
    c = COUNTS.setdefault(machine, {})
    c[what] = c.get(what, 0) + n


def free_gaps(base: int, cap: int, ranges: list[SlotRange]) -> list[SlotRange]:
    out, cursor = [], base
    for r in sorted(ranges):
        if r.start > cursor:
            out.append(SlotRange(cursor, r.start - cursor))
        cursor = max(cursor, r.end)
    if base + cap > cursor:
        out.append(SlotRange(cursor, base + cap - cursor))
    return out


def first_fit(base: int, cap: int, ranges: list[SlotRange], n: int) -> int | None:
    return next((g.start for g in free_gaps(base, cap, ranges) if g.length >= n), None)


# ---- HotPool ----------------------------------------------------------------------------
@dataclass
class Entry:
    range: SlotRange
    pins: int = 0
    refs: int = 0
    stamp: int = 0
    doomed: bool = False

    @property
    def evictable(self) -> bool:
        return self.pins == 0 and self.refs == 0


KEYS = st.sampled_from("abcdefgh")


class HotPoolMachine(RuleBasedStateMachine):
    """HotPool against a model; slot contents simulated (slot -> owner key)."""

    def __init__(self) -> None:
        super().__init__()
        self.base, self.cap = 3, 64
        self.pool = HotPool(self.base, self.cap)
        self.kv: list[Hashable | None] = [None] * (self.base + self.cap)
        self.m: dict[Hashable, Entry] = {}
        self.clock = 0
        _count("hot_pool", "runs")

    def _tick(self) -> int:
        self.clock += 1
        return self.clock

    def _lru(self) -> list[Hashable]:
        return sorted((k for k, e in self.m.items() if e.evictable),
                      key=lambda k: self.m[k].stamp)

    @rule(key=KEYS, n=st.one_of(st.integers(1, 24), st.integers(25, 72)), evict=st.booleans())
    def allocate(self, key: str, n: int, evict: bool) -> None:
        _count("hot_pool", "steps")
        if key in self.m:
            with pytest.raises(KeyError, match="already holds"):
                self.pool.allocate(key, n, evict=evict)
            return
        res = self.pool.allocate(key, n, evict=evict)
        cands = self._lru() if evict else []
        want_start, want_victims = None, ()
        if n <= self.cap:
            for k in range(len(cands) + 1):  # the shortest LRU run that makes room
                keep = [e.range for key_, e in self.m.items() if key_ not in cands[:k]]
                want_start = first_fit(self.base, self.cap, keep, n)
                if want_start is not None:
                    want_victims = tuple(cands[:k])
                    break
        if n > self.cap:
            assert (res.range, res.evicted, res.reason) == (None, (), "too_large")
            return
        if want_start is None:
            left = self.cap - sum(e.range.length for k, e in self.m.items() if k not in cands)
            assert res.range is None and res.evicted == ()
            assert res.reason == ("fragmented" if left >= n else "no_space"), res
            return
        assert res.ok and res.reason == ""
        assert res.range == SlotRange(want_start, n) and res.evicted == want_victims, res
        for v in res.evicted:
            del self.m[v]
        self.m[key] = Entry(res.range, stamp=self._tick())
        self.kv[res.range.start:res.range.end] = [key] * n  # the fill writes K/V
        _count("hot_pool", "allocations")

    @rule(key=KEYS)
    def pin(self, key: str) -> None:
        _count("hot_pool", "steps")
        if key not in self.m:
            with pytest.raises(KeyError, match="no HOT entry"):
                self.pool.pin(key)
            return
        self.pool.pin(key)
        self.m[key].pins += 1
        self.m[key].stamp = self._tick()

    @rule(key=KEYS)
    def unpin(self, key: str) -> None:
        _count("hot_pool", "steps")
        e = self.m.get(key)
        if e is None or e.pins == 0:
            with pytest.raises((KeyError, ValueError)):
                self.pool.unpin(key)
            return
        e.pins -= 1
        reaped = e.doomed and e.evictable
        assert self.pool.unpin(key) is reaped
        if reaped:
            del self.m[key]
            _count("hot_pool", "deferred_frees")

    @rule(key=KEYS)
    def acquire(self, key: str) -> None:
        _count("hot_pool", "steps")
        if key not in self.m:
            with pytest.raises(KeyError):
                self.pool.acquire(key)
            return
        assert self.pool.acquire(key) == self.m[key].range
        self.m[key].refs += 1
        self.m[key].stamp = self._tick()

    @rule(key=KEYS)
    def release(self, key: str) -> None:
        _count("hot_pool", "steps")
        e = self.m.get(key)
        if e is None or e.refs == 0:
            with pytest.raises((KeyError, ValueError)):
                self.pool.release(key)
            return
        r = e.range
        assert self.kv[r.start:r.end] == [key] * r.length  # read intact to the end
        e.refs -= 1
        reaped = e.doomed and e.evictable
        assert self.pool.release(key) is reaped
        if reaped:
            del self.m[key]
            _count("hot_pool", "deferred_frees")

    @rule(key=KEYS)
    def free(self, key: str) -> None:
        _count("hot_pool", "steps")
        e = self.m.get(key)
        if e is None:
            with pytest.raises(KeyError):
                self.pool.free(key)
            return
        now = e.evictable
        assert self.pool.free(key) is now
        if now:
            del self.m[key]
        else:
            e.doomed = True

    @rule(key=KEYS)
    def evict(self, key: str) -> None:
        _count("hot_pool", "steps")
        e = self.m.get(key)
        if e is None or not e.evictable:
            with pytest.raises((KeyError, ValueError)):
                self.pool.evict(key)
            return
        self.pool.evict(key)
        del self.m[key]

    @rule()
    def compact(self) -> None:
        _count("hot_pool", "steps")
        moves = self.pool.compact()
        for mv in moves:  # in order, each through a temporary
            assert mv.dst < mv.src and mv.length > 0
            self.kv[mv.dst:mv.dst + mv.length] = self.kv[mv.src:mv.src + mv.length]
        cursor = self.base
        for key, e in sorted(self.m.items(), key=lambda kv: kv[1].range.start):
            now = self.pool.range_of(key)
            if e.refs:
                assert now == e.range, "compaction moved an entry a request reads"
            else:
                assert now == SlotRange(cursor, e.range.length), "a gap was left"
            e.range = now
            cursor = now.end
        _count("hot_pool", "compaction_moves", len(moves))

    @invariant()
    def matches_the_model(self) -> None:
        assert set(self.pool.keys()) == set(self.m) and len(self.pool) == len(self.m)
        ranges = []
        for key, e in self.m.items():
            r = self.pool.range_of(key)
            assert r == e.range and self.base <= r.start and r.end <= self.base + self.cap
            assert self.pool.counts(key) == (e.pins, e.refs)
            assert self.kv[r.start:r.end] == [key] * r.length, f"{key}'s K/V was overwritten"
            ranges.append(r)
        ranges.sort()
        for a, b in zip(ranges, ranges[1:]):
            assert a.end <= b.start, (a, b)
        s = self.pool.stats()
        used = sum(r.length for r in ranges)
        largest = max((g.length for g in free_gaps(self.base, self.cap, ranges)), default=0)
        assert (s.capacity, s.used, s.free, s.entries) == (self.cap, used, self.cap - used,
                                                          len(ranges))
        assert s.pinned == sum(e.range.length for e in self.m.values() if e.pins)
        assert s.referenced == sum(e.range.length for e in self.m.values() if e.refs)
        assert s.largest_free_run == largest
        assert self.pool.evictable() == self._lru()
        assert not any(e.doomed and e.evictable for e in self.m.values())

    def teardown(self) -> None:
        """Drain: every reader finishes, every pin goes, every owner frees. Nothing may
        stay in the arena."""
        for key, e in list(self.m.items()):
            for _ in range(e.refs):
                self.pool.release(key)
            for _ in range(e.pins):
                self.pool.unpin(key)
            if key in self.pool:
                assert self.pool.free(key) is True
        s = self.pool.stats()
        assert (s.used, s.pinned, s.referenced, s.entries, len(self.pool)) == (0, 0, 0, 0, 0)
        assert s.largest_free_run == self.cap
        _count("hot_pool", "drained")


# ---- PrefixRegistry ---------------------------------------------------------------------
TEAMS = ("red", "blue")
N_IDS = 6
LENGTHS = (8, 30, 12, 40, 20, 52)  # p0 (red), p1 (blue), ...: their usual lengths


def stream(team: str, variant: int) -> list[int]:
    """Token streams: one team's prefixes of one variant are prefixes of each other."""
    seed = {"red": 11, "blue": 23}[team] * 7 + variant
    return [(seed * 7919 + 104729 * j) % 32000 + 1 for j in range(80)]


@dataclass
class Request:
    prefix_id: str
    range: SlotRange
    tokens: tuple[int, ...]


class PrefixRegistryMachine(RuleBasedStateMachine):
    """PrefixRegistry as the vLLM plugin uses it: register (a fill then mark_ready or
    abort_fill), requests that acquire a READY prefix and release it when they finish,
    unregister / unpin at any time, compaction moves applied to a simulated cache."""

    requests = Bundle("requests")
    CAP: ClassVar[int] = 96

    def __init__(self) -> None:
        super().__init__()
        self.reg = PrefixRegistry(HotPool(1, self.CAP))
        self.kv: list[int | None] = [None] * (1 + self.CAP)  # slot -> token (fake K/V)
        self.live: list[Request] = []
        _count("prefix_registry", "runs")

    def _all(self) -> list[PrefixRecord]:
        return [r for i in range(N_IDS) if (r := self.reg.peek(f"p{i}")) is not None]

    def _apply_moves(self) -> None:
        moves = self.reg.take_moves()
        for mv in moves:
            self.kv[mv.dst:mv.dst + mv.length] = self.kv[mv.src:mv.src + mv.length]
        _count("prefix_registry", "compaction_moves", len(moves))

    def _refs(self, pid: str) -> int:
        return sum(1 for q in self.live if q.prefix_id == pid)

    @initialize()
    def start(self) -> None:
        _count("prefix_registry", "steps")

    @rule(i=st.integers(0, N_IDS - 1), odd=st.integers(0, 7), pin=st.booleans())
    def register(self, i: int, odd: int, pin: bool) -> None:
        """Mostly the id's own team and tokens (so that prefixes get placed, filled and
        read); odd == 1: another team's id, 2: other tokens, 3: another length."""
        team = TEAMS[(i + (odd == 1)) % 2]
        n = LENGTHS[i] + (5 if odd == 3 else 0)
        self._register(team, i, 1 if odd == 2 else 0, n, pin)

    @rule(team=st.sampled_from(TEAMS), i=st.integers(0, N_IDS - 1), variant=st.integers(0, 1),
          n=st.integers(1, 80), pin=st.booleans())
    def register_anything(self, team: str, i: int, variant: int, n: int, pin: bool) -> None:
        self._register(team, i, variant, n, pin)

    def _register(self, team: str, i: int, variant: int, n: int, pin: bool) -> None:
        _count("prefix_registry", "steps")
        pid, toks = f"p{i}", stream(team, variant)[:n]
        old = self.reg.peek(pid)
        placed_before = {r.prefix_id: (r.hot, r.pinned, self._refs(r.prefix_id),
                                       r.state) for r in self._all()}
        largest = self.reg.pool.stats().largest_free_run
        if old is not None and (old.team != team or old.tokens != tuple(toks) or old.doomed):
            err = PrefixAccessDenied if old.team != team else PrefixConflict
            with pytest.raises(err):
                self.reg.register(team, toks, prefix_id=pid, pin=pin)
            _count("prefix_registry", "refused_registrations")
            return
        was_hot = old is not None and old.hot is not None
        rec = self.reg.register(team, toks, prefix_id=pid, pin=pin)
        self._apply_moves()  # the engine copies K/V before the next forward pass
        assert rec.prefix_id == pid and rec.team == team and rec.tokens == tuple(toks)
        if old is not None:
            assert rec is old
        if not was_hot:
            if n <= largest:
                assert rec.state is PrefixState.FILLING, "a free run fitted, yet COLD"
            if rec.state is PrefixState.FILLING:  # the registering request's prefill
                assert rec.hot is not None
                self.kv[rec.hot.start:rec.hot.end] = list(toks)
                _count("prefix_registry", "placements")
            else:
                assert rec.hot is None and rec.state is PrefixState.COLD
                _count("prefix_registry", "cold_registrations")
        for other, (hot, pinned, refs, state) in placed_before.items():
            now = self.reg.peek(other)
            if hot is not None and (now is None or now.hot is None) and other != pid:
                # evicted by this registration: only an unpinned prefix nobody reads
                assert not pinned and refs == 0 and state is PrefixState.READY, other
                assert now is not None and now.state is PrefixState.COLD
                _count("prefix_registry", "evictions")

    def _pick(self, k: int, state: PrefixState | None) -> str:
        """Mostly an id in ``state`` (so that rules act on live prefixes), else any."""
        ids = sorted(r.prefix_id for r in self._all() if state is None or r.state is state)
        return ids[k % len(ids)] if ids and k < 3 * N_IDS else f"p{k % N_IDS}"

    @rule(k=st.integers(0, 4 * N_IDS - 1))
    def fill_done(self, k: int) -> None:
        _count("prefix_registry", "steps")
        pid = self._pick(k, PrefixState.FILLING)
        before = self.reg.peek(pid)
        out = self.reg.mark_ready(pid)
        if before is None or before.state is not PrefixState.FILLING:
            assert out is before
            return
        if before.doomed:  # unregistered during its fill: gone now
            assert out is None and self.reg.peek(pid) is None and pid not in self.reg.pool
            _count("prefix_registry", "deferred_frees")
        else:
            assert out is before and before.state is PrefixState.READY

    @rule(k=st.integers(0, 4 * N_IDS - 1))
    def fill_aborted(self, k: int) -> None:
        _count("prefix_registry", "steps")
        pid = self._pick(k, PrefixState.FILLING)
        before = self.reg.peek(pid)
        was = before is not None and before.state is PrefixState.FILLING
        doomed = before is not None and before.doomed
        self.reg.abort_fill(pid)
        if was:
            assert pid not in self.reg.pool
            if doomed:
                assert self.reg.peek(pid) is None
            else:
                assert before is not None and before.state is PrefixState.COLD
                assert before.hot is None

    @rule(target=requests, k=st.integers(0, 4 * N_IDS - 1))
    def start_request(self, k: int) -> Any:
        """The KV manager's _take: a request bound to a prefix id."""
        _count("prefix_registry", "steps")
        pid = self._pick(k, PrefixState.READY)
        try:
            rec = self.reg.get(pid, None)
        except PrefixNotFound:
            assert self.reg.peek(pid) is None or self.reg.peek(pid).doomed  # type: ignore[union-attr]
            return None
        if rec.state is not PrefixState.READY:
            return None
        hot = self.reg.acquire(pid)
        assert hot is not None and hot == rec.hot
        assert self.kv[hot.start:hot.end] == list(rec.tokens), "a hit reads wrong K/V"
        q = Request(pid, hot, rec.tokens)
        self.live.append(q)
        _count("prefix_registry", "requests")
        return q

    @rule(target=requests, k=st.integers(0, 4 * N_IDS - 1))
    def start_another_request(self, k: int) -> Any:
        return self.start_request(k)

    @rule(team=st.sampled_from(TEAMS), variant=st.integers(0, 1), n=st.integers(1, 80))
    def match_prompt(self, team: str, variant: int, n: int) -> None:
        _count("prefix_registry", "steps")
        prompt = stream(team, variant)[:n]
        got = self.reg.match(team, prompt)
        cands = [r for r in self._all() if r.team == team and r.state is PrefixState.READY
                 and not r.doomed and r.length < n and r.tokens == tuple(prompt[:r.length])]
        if not cands:
            assert got is None
        else:
            assert got is not None and got in cands
            assert got.length == max(r.length for r in cands)

    @rule(q=consumes(requests))
    def finish_request(self, q: Request | None) -> None:
        _count("prefix_registry", "steps")
        if q is None:
            return
        assert self.kv[q.range.start:q.range.end] == list(q.tokens), "read corrupted K/V"
        rec = self.reg.peek(q.prefix_id)
        assert rec is not None and rec.hot == q.range, "moved under a reader"
        self.live.remove(q)
        last = rec.doomed and self._refs(q.prefix_id) == 0
        self.reg.release(q.prefix_id)
        if last:
            assert self.reg.peek(q.prefix_id) is None and q.prefix_id not in self.reg.pool
            _count("prefix_registry", "deferred_frees")

    @rule(k=st.integers(0, 4 * N_IDS - 1), cross=st.integers(0, 4))
    def unregister(self, k: int, cross: int) -> None:
        """Mostly by the owner (cross == 0: the other team)."""
        _count("prefix_registry", "steps")
        pid = self._pick(k, None)
        rec = self.reg.peek(pid)
        owner = rec.team if rec is not None else "red"
        team = owner if cross else TEAMS[1 - TEAMS.index(owner)]
        if rec is None or rec.doomed:
            with pytest.raises(PrefixNotFound):
                self.reg.unregister(pid, team)
            return
        if rec.team != team:
            with pytest.raises(PrefixAccessDenied):
                self.reg.unregister(pid, team)
            _count("prefix_registry", "cross_team_refusals")
            return
        busy = self._refs(pid) > 0 or rec.state is PrefixState.FILLING
        assert self.reg.unregister(pid, team) is (not busy)
        with pytest.raises(PrefixNotFound):
            self.reg.get(pid, team)
        assert rec not in self.reg.list(team)
        if busy:
            assert rec.hot is not None and self.reg.pool.range_of(pid) == rec.hot
            _count("prefix_registry", "unregistered_in_use")
        else:
            assert self.reg.peek(pid) is None and pid not in self.reg.pool

    @rule(k=st.integers(0, 4 * N_IDS - 1), cross=st.integers(0, 4), on=st.booleans())
    def pin_or_unpin(self, k: int, cross: int, on: bool) -> None:
        _count("prefix_registry", "steps")
        pid = self._pick(k, None)
        rec = self.reg.peek(pid)
        owner = rec.team if rec is not None else "red"
        team = owner if cross else TEAMS[1 - TEAMS.index(owner)]
        call = self.reg.pin if on else self.reg.unpin
        if rec is None or rec.doomed:
            with pytest.raises(PrefixNotFound):
                call(pid, team)
        elif rec.team != team:
            with pytest.raises(PrefixAccessDenied):
                call(pid, team)
            _count("prefix_registry", "cross_team_refusals")
        else:
            assert call(pid, team).pinned is on
            if not on and self._refs(pid):
                _count("prefix_registry", "unpinned_in_use")

    @rule()
    def compact(self) -> None:
        _count("prefix_registry", "steps")
        for mv in self.reg.apply_compaction():
            self.kv[mv.dst:mv.dst + mv.length] = self.kv[mv.src:mv.src + mv.length]
            _count("prefix_registry", "compaction_moves")

    @invariant()
    def consistent(self) -> None:
        recs = self._all()
        placed = {r.prefix_id: r for r in recs if r.hot is not None}
        assert set(self.reg.pool.keys()) == set(placed), "a slot range nobody owns"
        spans = sorted(r.hot for r in placed.values() if r.hot is not None)
        for a, b in zip(spans, spans[1:]):
            assert a.end <= b.start
        for r in recs:
            fill = r.state is PrefixState.FILLING
            assert (r.hot is not None) == (r.state is not PrefixState.COLD), r
            if r.doomed:
                assert self._refs(r.prefix_id) + fill > 0, "a doomed prefix nobody holds"
            if r.hot is None:
                continue
            assert self.reg.pool.range_of(r.prefix_id) == r.hot
            assert r.hot.length == r.length
            pins = 1 if r.pinned and not r.doomed else 0
            assert self.reg.pool.counts(r.prefix_id) == (pins, self._refs(r.prefix_id) + fill)
            assert self.kv[r.hot.start:r.hot.end] == list(r.tokens), f"{r.prefix_id}: K/V"
            other = "blue" if r.team == "red" else "red"
            if not r.doomed:
                with pytest.raises(PrefixAccessDenied):
                    self.reg.get(r.prefix_id, other)
                assert r not in self.reg.list(other)
        for q in self.live:
            rec = self.reg.peek(q.prefix_id)
            assert rec is not None and rec.hot == q.range

    def teardown(self) -> None:
        for q in list(self.live):
            self.reg.release(q.prefix_id)
        self.live.clear()
        for r in self._all():
            if r.state is PrefixState.FILLING:
                self.reg.mark_ready(r.prefix_id)
        for r in self._all():
            self.reg.unregister(r.prefix_id, r.team)
        s = self.reg.pool.stats()
        assert self._all() == [] and (s.used, s.pinned, s.referenced, s.entries) == (0, 0, 0, 0)
        _count("prefix_registry", "drained")


TestHotPool = HotPoolMachine.TestCase
TestHotPool.settings = RUNS
TestPrefixRegistry = PrefixRegistryMachine.TestCase
TestPrefixRegistry.settings = RUNS
