"""`granikv run` stopped by SIGTERM (what systemd, Kubernetes or a supervisor send),
as a user runs it: a subprocess with its own Ray cluster, serving after the demo.

The Ray processes it started (GCS, raylet, its agents, workers, Serve's actors) are
listed while it serves; after SIGTERM the command exits 0 within a bound, none of those
processes is left, and the API keys file it made for the run is gone. (One engine
start-up and the demo's short team run: about a minute, the price of checking the real
command.)
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import REPO, free_port, wait_until

pytestmark = [pytest.mark.ray, pytest.mark.vllm]
SERVING = "to stop"  # the last line `granikv run` prints before it waits


def ray_processes(root: psutil.Process) -> dict[tuple[int, float], str]:
    """(pid, start time) -> name of every process under ``root``."""
    out = {}
    for p in root.children(recursive=True):
        try:
            out[(p.pid, p.create_time())] = " ".join(p.cmdline()[:1]) or p.name()
        except psutil.Error:
            continue
    return out


def alive(procs: dict[tuple[int, float], str]) -> dict[tuple[int, float], str]:
    left = {}
    for (pid, started), name in procs.items():
        try:
            p = psutil.Process(pid)
            if p.create_time() == started and p.status() != psutil.STATUS_ZOMBIE:
                left[(pid, started)] = name
        except psutil.Error:
            continue
    return left


def test_sigterm_stops_serve_and_ray_and_removes_the_keys() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="gkvs-", dir="/tmp"))  # its own cluster and files
    env = {k: v for k, v in os.environ.items()
           if k not in ("RAY_ADDRESS", "GRANIKV_CONFIG", "GRANIKV_API_KEYS_FILE")}
    env.update(RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0", RAY_TMPDIR=str(tmp),
               TMPDIR=str(tmp), PYTHONUNBUFFERED="1")
    log = tmp / "out.txt"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "granikv_agents.cli", "run", "--port", str(free_port()),
             "--max-tokens", "2"], cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: SERVING in log.read_text() or proc.poll() is not None, 480,
                   "`granikv run` to serve", every_s=1.0)
        assert proc.poll() is None, log.read_text()[-3000:]
        keys = list(tmp.glob("granikv-keys-*/api-keys"))
        assert len(keys) == 1, list(tmp.iterdir())
        before = ray_processes(psutil.Process(proc.pid))
        names = " ".join(before.values())
        assert "raylet" in names and "gcs_server" in names, before
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=120)
        stopped_s = time.monotonic() - t0
        text = log.read_text()
        assert rc == 0 and "stopping" in text, (rc, text[-3000:])
        deadline = time.monotonic() + 30  # killed by then, or left behind
        while alive(before) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not alive(before), alive(before)
        assert not list(tmp.glob("granikv-keys-*")), list(tmp.iterdir())
        print(f"{len(before)} processes under `granikv run`; stopped in {stopped_s:.1f} s")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)
