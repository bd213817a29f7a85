"""HotPool: a contiguous arena of KV slots that holds pinned team prefixes.

One slot is one token's K/V in every layer. Each entry owns one contiguous run of slots,
so a prefix is a dense ``[L, Hkv, D]`` slab per layer that attention reads with no gather.
The pool is pure bookkeeping: it never touches K/V. Compaction returns the copies a
caller must apply to the cache.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass
from typing import NamedTuple


class SlotRange(NamedTuple):
    start: int
    length: int

    @property
    def end(self) -> int:
        return self.start + self.length


class Move(NamedTuple):
    """Copy slots ``[src, src + length)`` to ``[dst, dst + length)``; ``dst < src``.

    Moves are ordered: apply them one after another. A move may overlap its own source,
    so copy through a temporary (or front to back).
    """

    src: int
    dst: int
    length: int


class AllocResult(NamedTuple):
    range: SlotRange | None
    evicted: tuple[Hashable, ...]
    reason: str  # "" on success, else "too_large" | "no_space" | "fragmented"

    @property
    def ok(self) -> bool:
        return self.range is not None


class HotPoolStats(NamedTuple):
    capacity: int
    used: int
    pinned: int
    referenced: int
    free: int
    largest_free_run: int
    fragmentation: float  # 1 - largest_free_run / free; 0 when nothing is free
    entries: int


@dataclass
class _Entry:
    range: SlotRange
    pins: int = 0
    refs: int = 0
    last_used: int = 0
    doomed: bool = False  # freed by its owner while pinned or referenced

    @property
    def evictable(self) -> bool:
        return self.pins == 0 and self.refs == 0


class HotPool:
    """Contiguous arena over slots ``[start, start + capacity)``.

    Lifecycle of an entry: ``allocate`` -> (``pin``/``unpin``, ``acquire``/``release``)* ->
    ``free``. An entry with no pins and no references stays cached and is evicted
    least-recently-used first when space is needed. ``free`` on a pinned or referenced
    entry is deferred until both counts reach zero.
    """

    def __init__(self, start: int, capacity: int) -> None:
        if start < 0 or capacity < 0:
            raise ValueError(f"bad arena [{start}, {start}+{capacity})")
        self.start = start
        self.capacity = capacity
        self._entries: dict[Hashable, _Entry] = {}
        self._clock = 0

    # ---- queries ----------------------------------------------------------------
    def __contains__(self, key: Hashable) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def keys(self) -> Iterator[Hashable]:
        return iter(self._entries)

    def range_of(self, key: Hashable) -> SlotRange:
        return self._entry(key).range

    def counts(self, key: Hashable) -> tuple[int, int]:
        """(pins, refs) of an entry."""
        e = self._entry(key)
        return e.pins, e.refs

    def evictable(self) -> list[Hashable]:
        """Keys that eviction may take, least recently used first."""
        keys = [k for k, e in self._entries.items() if e.evictable]
        return sorted(keys, key=lambda k: self._entries[k].last_used)

    def stats(self) -> HotPoolStats:
        used = sum(e.range.length for e in self._entries.values())
        pinned = sum(e.range.length for e in self._entries.values() if e.pins)
        referenced = sum(e.range.length for e in self._entries.values() if e.refs)
        free = self.capacity - used
        run = max((g.length for g in self._gaps(set())), default=0)
        frag = 0.0 if free == 0 else 1.0 - run / free
        return HotPoolStats(self.capacity, used, pinned, referenced, free, run, frag,
                            len(self._entries))

    # ---- allocation ---------------------------------------------------------------
    def allocate(self, key: Hashable, n: int, *, evict: bool = True,
                 may_evict: Callable[[Hashable], bool] | None = None) -> AllocResult:
        """Reserve ``n`` contiguous slots for ``key`` (first fit).

        If nothing fits, evict the shortest least-recently-used run of evictable entries
        (those ``may_evict`` accepts, when given) that makes a fit. If no eviction
        would, evict nothing and say why.
        """
        if key in self._entries:
            raise KeyError(f"{key!r} already holds {self._entries[key].range}")
        if n <= 0:
            raise ValueError(f"allocate needs n > 0, got {n}")
        if n > self.capacity:
            return AllocResult(None, (), "too_large")
        victims: list[Hashable] = []
        candidates = self.evictable() if evict else []
        if may_evict is not None:
            candidates = [k for k in candidates if may_evict(k)]
        for k in range(len(candidates) + 1):
            victims = candidates[:k]
            start = self._first_fit(n, set(victims))
            if start is not None:
                for v in victims:
                    del self._entries[v]
                self._entries[key] = _Entry(SlotRange(start, n), last_used=self._tick())
                return AllocResult(SlotRange(start, n), tuple(victims), "")
        free_if_evicted = self.capacity - sum(
            e.range.length for k, e in self._entries.items() if k not in set(candidates))
        reason = "fragmented" if free_if_evicted >= n else "no_space"
        return AllocResult(None, (), reason)

    def free(self, key: Hashable) -> bool:
        """Release ``key``'s slots now if unpinned and unreferenced, else on the last
        unpin/release. Returns True when the slots were released now."""
        e = self._entry(key)
        if e.evictable:
            del self._entries[key]
            return True
        e.doomed = True
        return False

    def rename(self, key: Hashable, new_key: Hashable) -> None:
        """Move ``key``'s entry (range, pins, references) to ``new_key``."""
        if new_key in self._entries:
            raise KeyError(f"{new_key!r} already holds {self._entries[new_key].range}")
        self._entries[new_key] = self._entries.pop(key)

    def evict(self, key: Hashable) -> None:
        e = self._entry(key)
        if not e.evictable:
            raise ValueError(f"{key!r} is pinned or referenced (pins={e.pins}, refs={e.refs})")
        del self._entries[key]

    # ---- counts -----------------------------------------------------------------
    def pin(self, key: Hashable) -> None:
        e = self._entry(key)
        e.pins += 1
        e.last_used = self._tick()

    def unpin(self, key: Hashable) -> bool:
        """Returns True when this unpin released a doomed entry's slots."""
        e = self._entry(key)
        if e.pins == 0:
            raise ValueError(f"{key!r} is not pinned")
        e.pins -= 1
        return self._reap(key, e)

    def acquire(self, key: Hashable) -> SlotRange:
        """One request starts reading the entry: O(1), whatever its length."""
        e = self._entry(key)
        e.refs += 1
        e.last_used = self._tick()
        return e.range

    def release(self, key: Hashable) -> bool:
        """Returns True when this release freed a doomed entry's slots."""
        e = self._entry(key)
        if e.refs == 0:
            raise ValueError(f"{key!r} has no references")
        e.refs -= 1
        return self._reap(key, e)

    # ---- compaction ---------------------------------------------------------------
    def compact(self) -> list[Move]:
        """Slide unreferenced entries towards the arena start, closing gaps.

        Entries with live references stay where they are (requests' block tables point
        at them). Returns the moves, in the order to apply them.
        """
        moves: list[Move] = []
        cursor = self.start
        for e in sorted(self._entries.values(), key=lambda e: e.range.start):
            if e.refs == 0 and e.range.start > cursor:
                moves.append(Move(e.range.start, cursor, e.range.length))
                e.range = SlotRange(cursor, e.range.length)
            cursor = e.range.end
        return moves

    # ---- internals ----------------------------------------------------------------
    def _entry(self, key: Hashable) -> _Entry:
        try:
            return self._entries[key]
        except KeyError:
            raise KeyError(f"no HOT entry {key!r}") from None

    def _tick(self) -> int:
        self._clock += 1
        return self._clock

    def _reap(self, key: Hashable, e: _Entry) -> bool:
        if e.doomed and e.evictable:
            del self._entries[key]
            return True
        return False

    def _gaps(self, ignore: set[Hashable]) -> Iterator[SlotRange]:
        cursor = self.start
        taken = sorted(e.range for k, e in self._entries.items() if k not in ignore)
        for r in taken:
            if r.start > cursor:
                yield SlotRange(cursor, r.start - cursor)
            cursor = max(cursor, r.end)
        end = self.start + self.capacity
        if end > cursor:
            yield SlotRange(cursor, end - cursor)

    def _first_fit(self, n: int, ignore: set[Hashable]) -> int | None:
        for gap in self._gaps(ignore):
            if gap.length >= n:
                return gap.start
        return None
