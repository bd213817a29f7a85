"""Counters the engine exports as metrics, and the shapes of what the ``stats`` and
prefix control calls answer; pure Python.

The answers cross vLLM's utility-call channel (msgpack between the engine-core process
and the front end) and the platform's replica reports, so they are plain dicts; their
shapes are declared here (``TypedDict``) for the engine that writes them and for the
readers (the platform's ``metrics.py``, the benchmarks).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import TypedDict

from granikv_engine.dispatcher import Backend, Choice


class DispatchCounters:
    """Per-process tally of dispatcher decisions (one per HOT group per step)."""

    def __init__(self) -> None:
        self.steps = 0
        self.groups = Counter[str]()  # backend -> groups
        self.rows = Counter[str]()  # backend -> rows in those groups
        self.regimes = Counter[str]()  # regime -> groups
        self.sources = Counter[str]()  # table | roofline | forced
        self.plain_rows = 0  # rows with no HOT prefix
        self.graph_steps = 0  # steps cleared for FULL CUDA graphs
        self.graph_cascade_steps = 0  # of those, steps with a cascade group (graph form)
        self.group_sizes = Counter[str]()  # "<size bucket>/<backend>" -> HOT groups
        self.step_kinds = Counter[str]()  # "<decode|mixed>/<full|piecewise>" -> steps

    def record(self, choices: Iterable[Choice], group_rows: Iterable[int],
               num_rows: int, mixed: bool = False, full_graph: bool = False) -> None:
        """One planned step: its HOT groups' choices and sizes, its rows; ``mixed``: it
        holds prefill (a row with more than one query token); ``full_graph``: cleared
        for a FULL CUDA graph."""
        self.steps += 1
        grouped = 0
        cascade = False
        for c, rows in zip(choices, group_rows):
            self.groups[c.backend.value] += 1
            self.rows[c.backend.value] += rows
            self.regimes[c.regime.value] += 1
            self.sources[c.source] += 1
            self.group_sizes[size_key(rows, c.backend.value)] += 1
            grouped += rows
            cascade |= c.backend is Backend.CASCADE
        self.plain_rows += num_rows - grouped
        if full_graph:
            self.graph_steps += 1
            self.graph_cascade_steps += cascade
        self.step_kinds[f"{'mixed' if mixed else 'decode'}/"
                        f"{'full' if full_graph else 'piecewise'}"] += 1

    def snapshot(self) -> DispatchSnapshot:
        return {"steps": self.steps, "groups": dict(self.groups), "rows": dict(self.rows),
                "regimes": dict(self.regimes), "sources": dict(self.sources),
                "plain_rows": self.plain_rows, "graph_steps": self.graph_steps,
                "graph_cascade_steps": self.graph_cascade_steps,
                "group_sizes": dict(self.group_sizes), "step_kinds": dict(self.step_kinds)}


def size_bucket(rows: int) -> int:
    """The power of two a group of ``rows`` rows is counted under: the smallest one that
    is not below it (1, 2, 4, 8, ...)."""
    return 1 << max(rows - 1, 0).bit_length()


def size_key(rows: int, backend: str) -> str:
    """``group_sizes``' key of a group of ``rows`` rows on ``backend``."""
    return f"{size_bucket(rows)}/{backend}"


def parse_size_key(key: str) -> tuple[int, str]:
    """(size bucket, backend) of a ``group_sizes`` key."""
    size, backend = key.split("/")
    return int(size), backend


class DispatchSnapshot(TypedDict):
    """``DispatchCounters.snapshot()``: HOT groups, rows, regimes and sources by choice;
    steps cleared for FULL CUDA graphs."""

    steps: int
    groups: dict[str, int]  # backend -> HOT groups
    rows: dict[str, int]  # backend -> rows in those groups
    regimes: dict[str, int]
    sources: dict[str, int]  # table | roofline | forced
    plain_rows: int
    graph_steps: int
    graph_cascade_steps: int
    group_sizes: dict[str, int]  # "<size bucket>/<backend>" -> HOT groups (size_bucket)
    step_kinds: dict[str, int]  # "<decode|mixed>/<full|piecewise>" -> steps


class PrefixRecordView(TypedDict):
    """One prefix as the engine holds it (control ops ``list``, ``get``, ``pin``...)."""

    prefix_id: str
    team: str
    length: int  # tokens
    state: str  # PrefixState's value: filling, ready, cold, ...
    pinned: bool
    hits: int  # requests served from it
    implicit: bool  # promoted by the engine (a shared prompt head), not registered
    content_hash: str
    hot_start: int | None  # first HOT slot; None when not in HOT


class HotStats(TypedDict):
    """``HotPool.stats()``: slots of the HOT arena."""

    capacity: int
    used: int
    pinned: int
    referenced: int
    free: int
    largest_free_run: int
    fragmentation: float
    entries: int


class ColdStats(TypedDict):
    capacity: int  # COLD slots (tokens)
    free: int
    used: int
    usage: float


class ImplicitStats(TypedDict):
    """Implicit HOT: shared prompt heads the engine promoted (core/implicit.py)."""

    enabled: bool
    budget: int  # HOT slots implicit prefixes may hold together
    used: int
    entries: int
    promotions: int
    evictions: int
    adoptions: int  # registrations that took over an implicit prefix
    hits: int  # requests served from an implicit prefix


class HitStats(TypedDict):
    hits: int  # requests served from a HOT prefix
    hit_tokens: int  # prompt tokens read from HOT
    cold_fallbacks: int  # named a prefix that was not READY in HOT
    cold_replaced: int  # of those: the id was registered again with other tokens
    implicit_hits: int  # of the hits: on a prefix the engine promoted


class TeamHotStats(TypedDict):
    used: int
    budget: int | None


class EngineStats(TypedDict, total=False):
    """The ``stats`` control call: the engine core's view (hot, cold, prefixes by state,
    hits, events, ...) and the workers' dispatcher counters (rank 0's)."""

    hot: HotStats
    cold: ColdStats
    prefixes: dict[str, int]  # state -> prefixes
    hits: HitStats
    events: dict[str, int]  # bound_requests, registrations, fills_done, bind_errors, ...
    evictions: int
    compactions: int
    cold_registrations: int
    replacements: int  # ids registered again with other tokens
    # per team: HOT slots held and its budget (None: no per-team budgets); and the
    # registrations COLD because their team's budget was full
    teams: dict[str, TeamHotStats]
    over_budget: int
    implicit: ImplicitStats
    seeded_hash_tokens: int
    scheduler: dict[str, float]  # StepStats.snapshot()
    dispatch: DispatchSnapshot
    dispatch_ranks_agree: bool
