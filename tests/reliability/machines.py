"""What the state machines share (test_hot_pool_machine.py,
test_prefix_registry_machine.py, test_registry_state_machine.py): hypothesis settings,
and the counts of the steps they tried, written into the figures file (figures.py)
under ``engine_properties``."""

from __future__ import annotations

from collections.abc import Iterator

from hypothesis import HealthCheck, settings

from tests.reliability.figures import record

RUNS = settings(max_examples=150, stateful_step_count=60, deadline=None,
                suppress_health_check=[HealthCheck.too_slow])
COUNTS: dict[str, dict[str, int]] = {}  # per machine; shared by both modules


def count(machine: str, what: str, n: int = 1) -> None:
    c = COUNTS.setdefault(machine, {})
    c[what] = c.get(what, 0) + n


def record_counts() -> Iterator[None]:
    """Body of a module fixture: after the module's machines ran, write every machine's
    counts so far (the section is rewritten whole, so both modules' counts stay)."""
    yield
    if COUNTS:
        record("engine_properties", examples_per_machine=RUNS.max_examples,
               max_steps_per_example=RUNS.stateful_step_count, **COUNTS)
