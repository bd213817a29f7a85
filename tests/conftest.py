"""One real Ray cluster and one real GraniKV Serve app for the whole suite (tests/platform
and tests/agents share it: engine start-ups cost 15-60 s each on a 2-core machine).

Ray runs on ``num_cpus=2`` with auth disabled and a private RAY_TMPDIR; the app is
deploy/local.yaml's (agents routes and run service included) with two CPU replicas
(0.5 CPU each), a fast sync period, its own registry file and its own run store. Tests
talk to it over HTTP on 127.0.0.1, with API keys made for this test session (``API_KEYS``: one
per team, and the operator's), written to a keys file in the session's temp folder. The
app is session-scoped; tests that disturb it (replica and executor restarts) wait until
it has recovered, and the platform's replica restart test runs last among the
platform's (test_serve_replicas.py), as tests/reliability/test_replica_kill.py does in
its folder.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from granikv_platform.auth import OPERATOR, new_key, write_keys_file
from granikv_platform.front import CALLBACK, PROXY_CALLBACK_ENV
from granikv_platform.names import TEAM_HEADER as TEAM_HEADER  # re-exported

REPO = Path(__file__).resolve().parents[1]
LOCAL_YAML = REPO / "deploy" / "local.yaml"
APP = "gkvtest"
SYNC_PERIOD_S = 0.5
# configured teams, each with a key
TEAMS = ("red", "blue", "gold", "green", "fuzz", "chaos", "bench", "plain")
# Made per session, never stored in the repository.
API_KEYS: dict[str, str] = {who: new_key() for who in (*TEAMS, OPERATOR)}
ADMIN = {"Authorization": f"Bearer {API_KEYS[OPERATOR]}"}


# Request limits of the session app (tests/reliability/test_access.py checks each one).
LIMITS = {"max_body_bytes": 131072, "max_prompt_tokens": 1792, "max_prefix_tokens": 1536,
          "max_tokens": 64, "max_choices": 2}


def auth(team: str) -> dict[str, str]:
    """Headers of a team's (or ``@admin``'s) calls."""
    return {"Authorization": f"Bearer {API_KEYS[team]}"}

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
# Ray's memory monitor kills workers (replicas, the Serve controller, the registry) when
# the whole machine is above 95% memory, whoever uses it: on a shared or small CI
# machine it replaced replicas in the middle of tests (docs/reliability.md). Off for the
# suite's clusters (the subprocess ones inherit it); the kernel's OOM killer remains.
os.environ.setdefault("RAY_memory_monitor_refresh_ms", "0")
# Serve's proxy answers in the platform's shape, as on a cluster `granikv run` starts.
os.environ.setdefault(PROXY_CALLBACK_ENV, CALLBACK)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(pred: Callable[[], Any], timeout_s: float, what: str,
               every_s: float = 0.25) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(every_s)


def app_args(tmp: Path, **replicas: Any) -> dict[str, Any]:
    """deploy/local.yaml's args, with test settings."""
    from granikv_platform.loader import load_serve_config

    args = load_serve_config(LOCAL_YAML).apps[0].config.model_dump(mode="json")
    args["name"] = APP
    args["replicas"].update(num_replicas=2, num_cpus=0.5, sync_period_s=SYNC_PERIOD_S,
                            **replicas)
    args["registry"] = {"name": f"{APP}-registry-{os.getpid()}",
                        "state_path": str(tmp / "registry.json")}
    args["teams"] = [*args["teams"], {"name": "green", "description": "a third team"},
                     {"name": "fuzz", "description": "schemathesis's (tests/reliability)"},
                     {"name": "chaos", "description": "fault injection (tests/reliability)"},
                     {"name": "bench", "description": "the online load generator's"},
                     {"name": "plain", "description": "a team that never sets a context"}]
    write_keys_file(tmp / "api-keys", API_KEYS.items())
    args["auth"] = {"mode": "keys", "keys_file": str(tmp / "api-keys")}
    args["limits"] = LIMITS
    for svc in args["services"]:  # the agents' run executor: its own file, quick retries
        if svc["name"] == "agents":
            svc["options"].update(store_path=str(tmp / "runs.sqlite"), retry={
                "max_attempts": 6, "initial_interval_s": 0.2, "max_interval_s": 2.0})
    return args


@pytest.fixture(scope="session")
def ray_serve(request: pytest.FixtureRequest) -> Iterator[int]:
    """A local Ray cluster with Serve's HTTP proxy on a free loopback port. When a test
    of the session failed, Ray's logs (replicas, engines, raylet, GCS, Serve) are kept
    in runs/ray-logs/ before the cluster's temp folder goes."""
    import ray
    from ray import serve

    # A private RAY_TMPDIR; Unix socket paths must stay short: directly under /tmp.
    own_tmp = None if "RAY_TMPDIR" in os.environ else tempfile.mkdtemp(prefix="gkvt-", dir="/tmp")
    if own_tmp:
        os.environ["RAY_TMPDIR"] = own_tmp
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, namespace="gkvtest")
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    yield port
    try:
        serve.shutdown()
    finally:
        ray.shutdown()  # stops the cluster this process started (raylet, GCS, workers)
        if own_tmp:
            del os.environ["RAY_TMPDIR"]
            if request.session.testsfailed:
                keep_ray_logs(Path(own_tmp))
            shutil.rmtree(own_tmp, ignore_errors=True)


def keep_ray_logs(ray_tmp: Path) -> None:
    """Copy the Ray session logs under ``ray_tmp`` to runs/ray-logs/<session>/."""
    for logs in ray_tmp.glob("ray/session_2*/logs"):
        dest = REPO / "runs" / "ray-logs" / logs.parent.name
        shutil.copytree(logs, dest, dirs_exist_ok=True, ignore_dangling_symlinks=True,
                        ignore=shutil.ignore_patterns("*.sock", "*.lock"))
        print(f"\nRay's logs of this test session: {dest}")


@pytest.fixture(scope="session")
def app_config(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return app_args(tmp_path_factory.mktemp("platform"))


@pytest.fixture(scope="session")
def base_url(ray_serve: int, app_config: dict[str, Any]) -> str:
    from ray import serve

    from granikv_platform.builder import build_app

    serve.run(build_app(app_config), name=APP, route_prefix="/")
    url = f"http://127.0.0.1:{ray_serve}"
    # Both replicas report once they have started and reconciled with the registry.
    wait_until(lambda: len(stats(url)["replicas"]) == 2, 60, "two live replicas")
    return url


@pytest.fixture
def client(base_url: str) -> Iterator[Callable[[str | None], httpx.Client]]:
    made: list[httpx.Client] = []

    def make(team: str | None) -> httpx.Client:
        """A client with ``team``'s API key (``@admin``: the operator's; None: no key)."""
        c = httpx.Client(base_url=base_url, headers=auth(team) if team else {}, timeout=120)
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()


def stats(url: str) -> dict[str, Any]:
    r = httpx.get(f"{url}/v1/granikv/stats", headers=ADMIN, timeout=30)
    r.raise_for_status()
    return r.json()  # type: ignore[no-any-return]


def counters(report: dict[str, Any]) -> dict[str, int]:
    g = report["granikv"]
    return {"hits": g["hits"]["hits"], "hit_tokens": g["hits"]["hit_tokens"],
            "cold_fallbacks": g["hits"]["cold_fallbacks"],
            "bind_errors": g["events"]["bind_errors"],
            "bound_requests": g["events"]["bound_requests"],
            "prefix_reads_skipped": g["events"]["prefix_reads_skipped"]}


def fresh_stats(url: str, after: dict[str, Any]) -> dict[str, Any]:
    """Stats whose every replica reported after the reports in ``after``."""
    seen = {r: s["reported_at"] for r, s in after["replicas"].items()}

    def newer() -> dict[str, Any] | None:
        s = stats(url)
        ok = all(rep["reported_at"] > seen.get(r, 0.0) for r, rep in s["replicas"].items())
        return s if ok and s["replicas"] else None

    return wait_until(newer, 20, "fresh replica reports")  # type: ignore[no-any-return]
