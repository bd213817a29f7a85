"""``make run``'s local cluster (granikv_platform/local.py): the start-up says what it
is doing, stage by stage, and where the logs are; a cluster it starts listens on the
loopback address only."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from ray.serve._private.common import (
    DeploymentStatus,
    DeploymentStatusTrigger,
    ReplicaState,
)
from ray.serve.schema import (
    ApplicationStatus,
    ApplicationStatusOverview,
    DeploymentStatusOverview,
)

from granikv_platform import local

REPO = Path(__file__).resolve().parents[2]


def app(**replicas: dict[ReplicaState, int]) -> ApplicationStatusOverview:
    return ApplicationStatusOverview(
        status=ApplicationStatus.DEPLOYING, message="", last_deployed_time_s=0.0,
        deployments={name.replace("_", "-"): DeploymentStatusOverview(
            status=DeploymentStatus.UPDATING,
            status_trigger=DeploymentStatusTrigger.CONFIG_UPDATE_STARTED,
            replica_states=states, message="") for name, states in replicas.items()})


def test_replica_progress_names_each_deployments_replicas_by_state() -> None:
    S, R = ReplicaState.STARTING, ReplicaState.RUNNING
    apps = {"granikv": app(granikv_llm={S: 2}, granikv_agents={R: 1}, granikv_extra={})}
    assert local.replica_progress(apps) == {
        "granikv/granikv-llm": "0 of 2 replicas ready (2 starting)",
        "granikv/granikv-agents": "1 of 1 replica ready",
        "granikv/granikv-extra": "no replica yet",
    }
    apps = {"granikv": app(granikv_llm={S: 1, R: 1})}
    assert local.replica_progress(apps) == {
        "granikv/granikv-llm": "1 of 2 replicas ready (1 starting)"}


def test_progress_says_only_what_changed() -> None:
    lines: list[str] = []
    seen: dict[str, str] = {}
    S, R = ReplicaState.STARTING, ReplicaState.RUNNING
    for states in ({S: 2}, {S: 2}, {S: 1, R: 1}, {R: 2}):
        local.report_changes(local.replica_progress({"a": app(a_llm=states)}), seen,
                             lines.append)
    assert lines == ["a/a-llm: 0 of 2 replicas ready (2 starting)",
                     "a/a-llm: 1 of 2 replicas ready (1 starting)",
                     "a/a-llm: 2 of 2 replicas ready"]


# Run in a fresh process: Ray's processes and their listening sockets, as local.start
# starts them (no Serve: the sockets are Ray's own).
LISTENERS = """
import json, psutil
from granikv_platform import local
logs = local.start_ray(None, verbose=False, allow_ray_auth_disabled=True)  # the suite's
procs = [psutil.Process(), *psutil.Process().children(recursive=True)]
found = []
for p in procs:
    try:
        found += [[p.name(), c.laddr.ip, c.laddr.port] for c in p.net_connections("inet")
                  if c.status == psutil.CONN_LISTEN]
    except psutil.Error:
        pass
print("RESULT", json.dumps({"logs": str(logs), "listen": found}))
local.stop()
"""


@pytest.fixture
def ray_tmp() -> Iterator[Path]:
    """A private RAY_TMPDIR directly under /tmp (Unix socket paths must stay short)."""
    path = Path(tempfile.mkdtemp(prefix="gkvl-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.ray
def test_a_local_cluster_listens_on_loopback_only(ray_tmp: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS",)}
    env["RAY_TMPDIR"] = str(ray_tmp)
    proc = subprocess.run([sys.executable, "-c", LISTENERS], cwd=ray_tmp, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    (line,) = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    out = json.loads(line.removeprefix("RESULT "))
    names = {name for name, _, _ in out["listen"]}
    assert any("raylet" in n for n in names) and any("gcs" in n for n in names), names
    wild = [x for x in out["listen"] if x[1] not in ("127.0.0.1", "::ffff:127.0.0.1", "::1")]
    assert not wild, f"listening beyond loopback: {wild}"
    assert out["logs"].startswith(str(ray_tmp)) and Path(out["logs"]).is_dir()


def test_a_local_run_refuses_serves_haproxy_front(ray_tmp: Path) -> None:
    """HAProxy mode listens on every interface: `granikv run` says so and starts
    nothing (no Ray folder under its RAY_TMPDIR)."""
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS",)}
    env.update(RAY_TMPDIR=str(ray_tmp), RAY_SERVE_ENABLE_HA_PROXY="1")
    proc = subprocess.run([sys.executable, "-m", "granikv_agents.cli", "run", "--once"],
                          cwd=ray_tmp, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "every interface" in proc.stderr and "127.0.0.1 only" in proc.stderr, proc.stderr
    assert not list(ray_tmp.iterdir())
