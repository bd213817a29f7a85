"""ColdPool: token-granularity slot accounting for agent-private tokens.

Inside vLLM the COLD pool *is* vLLM's ``BlockPool`` at ``block_size=1`` (see
``vllm_plugin/kv_manager.py``); this class is the engine-agnostic model of it, used by the
reference pipeline and by tests: per-request slot lists, exact usage, no fragmentation
inside a request because one slot holds one token.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Iterable
from typing import NamedTuple


class ColdPoolStats(NamedTuple):
    capacity: int
    used: int
    free: int
    requests: int


class ColdPool:
    """Slots ``ids`` minus the HOT arena; hands out single slots, never runs."""

    def __init__(self, slot_ids: Iterable[int]) -> None:
        self._free: deque[int] = deque(slot_ids)
        self.capacity = len(self._free)
        if len(set(self._free)) != self.capacity:
            raise ValueError("duplicate slot ids")
        self._owned: dict[Hashable, list[int]] = {}

    def can_allocate(self, n: int) -> bool:
        return n <= len(self._free)

    def allocate(self, request: Hashable, n: int) -> list[int]:
        """Append ``n`` slots to ``request``'s list; all or nothing."""
        if n < 0:
            raise ValueError(f"n must be >= 0, got {n}")
        if not self.can_allocate(n):
            raise MemoryError(f"COLD pool has {len(self._free)} free slots, asked {n}")
        new = [self._free.popleft() for _ in range(n)]
        self._owned.setdefault(request, []).extend(new)
        return new

    def slots(self, request: Hashable) -> list[int]:
        return list(self._owned.get(request, ()))

    def free(self, request: Hashable) -> int:
        """Return every slot of ``request``; returns how many."""
        slots = self._owned.pop(request, [])
        self._free.extend(reversed(slots))
        return len(slots)

    def stats(self) -> ColdPoolStats:
        free = len(self._free)
        return ColdPoolStats(self.capacity, self.capacity - free, free, len(self._owned))
