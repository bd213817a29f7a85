"""stats.DispatchCounters: the dispatcher's choices by group size, and steps by kind."""

from __future__ import annotations

from granikv_engine.dispatcher import Backend, Choice, Regime
from granikv_engine.stats import DispatchCounters, DispatchSnapshot, size_bucket


def choice(backend: Backend) -> Choice:
    return Choice(backend, Regime.MEMORY, 1.0, 2.0, "table")


def test_size_buckets_are_the_next_power_of_two() -> None:
    assert [size_bucket(n) for n in (0, 1, 2, 3, 4, 5, 8, 9, 256, 257)] == \
        [1, 1, 2, 4, 4, 8, 8, 16, 256, 512]


def test_record_counts_groups_by_size_and_steps_by_kind() -> None:
    c = DispatchCounters()
    # a mixed step in eager (piecewise) mode: a 200-row cascade group, a 3-row paged one,
    # and 10 rows with no HOT prefix
    c.record([choice(Backend.CASCADE), choice(Backend.PAGED)], [200, 3], 213, mixed=True)
    # the batch shrinks: a decode step in a FULL graph, one 100-row cascade group
    c.record([choice(Backend.CASCADE)], [100], 100, full_graph=True)
    snap = c.snapshot()
    assert snap["group_sizes"] == {"256/cascade": 1, "4/paged": 1, "128/cascade": 1}
    assert snap["step_kinds"] == {"mixed/piecewise": 1, "decode/full": 1}
    assert snap["groups"] == {"cascade": 2, "paged": 1} and snap["plain_rows"] == 10
    assert snap["steps"] == 2
    assert set(snap) == set(DispatchSnapshot.__annotations__)  # the declared shape
