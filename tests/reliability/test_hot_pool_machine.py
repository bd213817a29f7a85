"""A hypothesis state machine over ``HotPool`` (granikv_engine), driven the way the vLLM
plugin drives it. Each rule is checked against an independent model (first fit, LRU
eviction, pin and reference counts, deferred free, compaction moves applied to a
simulated K/V cache); after every step the ranges are disjoint and inside the arena and
the statistics equal the model's. Every run ends by freeing everything: the arena must
then be empty (no leaked slot, no leaked pin)."""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from dataclasses import dataclass

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    rule,
)

from granikv_engine.hot_pool import HotPool, SlotRange
from tests.reliability.machines import RUNS, count, record_counts


@pytest.fixture(scope="module", autouse=True)
def _figures() -> Iterator[None]:
    yield from record_counts()


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
        count("hot_pool", "runs")

    def _tick(self) -> int:
        self.clock += 1
        return self.clock

    def _lru(self) -> list[Hashable]:
        return sorted((k for k, e in self.m.items() if e.evictable),
                      key=lambda k: self.m[k].stamp)

    @rule(key=KEYS, n=st.one_of(st.integers(1, 24), st.integers(25, 72)), evict=st.booleans())
    def allocate(self, key: str, n: int, evict: bool) -> None:
        count("hot_pool", "steps")
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
        count("hot_pool", "allocations")

    @rule(key=KEYS)
    def pin(self, key: str) -> None:
        count("hot_pool", "steps")
        if key not in self.m:
            with pytest.raises(KeyError, match="no HOT entry"):
                self.pool.pin(key)
            return
        self.pool.pin(key)
        self.m[key].pins += 1
        self.m[key].stamp = self._tick()

    @rule(key=KEYS)
    def unpin(self, key: str) -> None:
        count("hot_pool", "steps")
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
            count("hot_pool", "deferred_frees")

    @rule(key=KEYS)
    def acquire(self, key: str) -> None:
        count("hot_pool", "steps")
        if key not in self.m:
            with pytest.raises(KeyError):
                self.pool.acquire(key)
            return
        assert self.pool.acquire(key) == self.m[key].range
        self.m[key].refs += 1
        self.m[key].stamp = self._tick()

    @rule(key=KEYS)
    def release(self, key: str) -> None:
        count("hot_pool", "steps")
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
            count("hot_pool", "deferred_frees")

    @rule(key=KEYS)
    def free(self, key: str) -> None:
        count("hot_pool", "steps")
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
        count("hot_pool", "steps")
        e = self.m.get(key)
        if e is None or not e.evictable:
            with pytest.raises((KeyError, ValueError)):
                self.pool.evict(key)
            return
        self.pool.evict(key)
        del self.m[key]

    @rule()
    def compact(self) -> None:
        count("hot_pool", "steps")
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
        count("hot_pool", "compaction_moves", len(moves))

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
        count("hot_pool", "drained")


TestHotPool = HotPoolMachine.TestCase
TestHotPool.settings = RUNS
