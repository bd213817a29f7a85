"""Counters the engine exports as metrics; pure Python, snapshot as plain dicts."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from granikv_engine.dispatcher import Choice


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

    def record(self, choices: Iterable[Choice], group_rows: Iterable[int],
               num_rows: int) -> None:
        self.steps += 1
        grouped = 0
        for c, rows in zip(choices, group_rows):
            self.groups[c.backend.value] += 1
            self.rows[c.backend.value] += rows
            self.regimes[c.regime.value] += 1
            self.sources[c.source] += 1
            grouped += rows
        self.plain_rows += num_rows - grouped

    def snapshot(self) -> dict[str, object]:
        return {"steps": self.steps, "groups": dict(self.groups), "rows": dict(self.rows),
                "regimes": dict(self.regimes), "sources": dict(self.sources),
                "plain_rows": self.plain_rows, "graph_steps": self.graph_steps,
                "graph_cascade_steps": self.graph_cascade_steps}
