"""The platform tests share the suite's Ray cluster and Serve app (tests/conftest.py);
their helpers are re-exported here for the platform tests' imports."""

from __future__ import annotations

from tests.conftest import (
    ADMIN,
    API_KEYS,
    APP,
    LOCAL_YAML,
    SYNC_PERIOD_S,
    TEAM_HEADER,
    app_args,
    auth,
    counters,
    free_port,
    fresh_stats,
    stats,
    wait_until,
)

__all__ = ["ADMIN", "API_KEYS", "APP", "LOCAL_YAML", "SYNC_PERIOD_S", "TEAM_HEADER",
           "app_args", "auth", "counters", "free_port", "fresh_stats", "stats",
           "wait_until"]
