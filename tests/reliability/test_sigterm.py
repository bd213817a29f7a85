"""`granikv run` stopped by SIGTERM (what systemd, Kubernetes or a supervisor send),
as a user runs it: a subprocess with its own Ray cluster, serving after the demo.

The Ray processes it started (GCS, raylet, its agents, workers, Serve's actors) are
listed while it serves, with the shared-memory segments and semaphores they map. A
stream is in flight when SIGTERM comes: it ends with ``[DONE]`` or an error event, not
a cut connection (the apps are drained before Serve's proxy stops). The command exits 0
within a bound, none of those processes is left, nor any of those segments, nor a
socket file in the run's temp folder, and the API keys file it made for the run is
gone. (One engine start-up and the demo's short team run: about a minute, the price of
checking the real command.)
"""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import psutil
import pytest

from granikv_platform.auth import plain_keys
from tests.conftest import REPO, free_port, wait_until
from tests.reliability.figures import record

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


def shared_memory(procs: dict[tuple[int, float], str]) -> set[str]:
    """/dev/shm files (multiprocessing's psm_* segments, sem.* semaphores) that
    ``procs`` map."""
    out = set()
    for pid, _ in procs:
        try:
            maps = psutil.Process(pid).memory_maps(grouped=True)
        except psutil.Error:
            continue
        out |= {m.path for m in maps if m.path.startswith("/dev/shm/")}
    return out


def sockets(folder: Path) -> list[str]:
    """Socket files under ``folder`` (vLLM's ZMQ IPC sockets go to the temp folder),
    except in Ray's session folders, which Ray keeps after it stops (with its logs)."""
    out = []
    for p in folder.rglob("*"):
        rel = p.relative_to(folder)
        try:
            if stat.S_ISSOCK(p.lstat().st_mode) and rel.parts[:1] != ("ray",):
                out.append(str(rel))
        except OSError:
            continue
    return out


def stream_until_stopped(url: str, key: str, first: threading.Event,
                         ends: list[str]) -> None:
    """A long completion stream; ``ends`` gets how it ended: done, error, or cut."""
    body = {"model": "tiny-llama", "prompt": "count: one two", "max_tokens": 1000,
            "ignore_eos": True, "stream": True}
    last = ""
    try:
        with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=120,
                          headers={"Authorization": f"Bearer {key}"}) as r:
            for line in r.iter_lines():
                if line.startswith("data: "):
                    first.set()
                    last = line
    except httpx.HTTPError as e:
        ends.append(f"cut ({type(e).__name__})")
        return
    finally:
        first.set()
    ends.append("done" if last == "data: [DONE]" else
                "error" if '"error"' in last else f"cut after {last[:80]!r}")


def test_sigterm_stops_serve_and_ray_and_removes_the_keys() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="gkvs-", dir="/tmp"))  # its own cluster and files
    env = {k: v for k, v in os.environ.items()
           if k not in ("RAY_ADDRESS", "GRANIKV_CONFIG", "GRANIKV_API_KEYS_FILE")}
    env.update(RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0", RAY_TMPDIR=str(tmp),
               TMPDIR=str(tmp), PYTHONUNBUFFERED="1")
    log = tmp / "out.txt"
    port = free_port()
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "granikv_agents.cli", "run", "--port", str(port),
             "--max-tokens", "2", "--allow-ray-auth-disabled"],  # as the suite's cluster
            cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: SERVING in log.read_text() or proc.poll() is not None, 480,
                   "`granikv run` to serve", every_s=1.0)
        assert proc.poll() is None, log.read_text()[-3000:]
        keys = list(tmp.glob("granikv-keys-*/api-keys"))
        assert len(keys) == 1, list(tmp.iterdir())
        before = ray_processes(psutil.Process(proc.pid))
        names = " ".join(before.values())
        assert "raylet" in names and "gcs_server" in names, before
        shm = shared_memory(before)
        assert any("psm_" in p for p in shm), shm  # the engine's message queues
        first, ends = threading.Event(), list[str]()
        streamer = threading.Thread(target=stream_until_stopped, args=(
            f"http://127.0.0.1:{port}", plain_keys(keys[0])["red"], first, ends))
        streamer.start()
        assert first.wait(120), "the stream did not start"
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        in_flight = not ends
        rc = proc.wait(timeout=120)
        stopped_s = time.monotonic() - t0
        text = log.read_text()
        assert rc == 0 and "stopping" in text, (rc, text[-3000:])
        deadline = time.monotonic() + 30  # killed by then, or left behind
        while alive(before) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not alive(before), alive(before)
        assert not list(tmp.glob("granikv-keys-*")), list(tmp.iterdir())
        streamer.join(60)
        assert in_flight and ends and not ends[0].startswith("cut"), (in_flight, ends)
        left = sorted(p for p in shm if os.path.exists(p))
        assert not left, left
        assert not sockets(tmp), sockets(tmp)
        print(f"{len(before)} processes under `granikv run`, {len(shm)} shared-memory "
              f"files; stopped in {stopped_s:.1f} s; the stream in flight: {ends[0]}")
        record("sigterm", processes=len(before), shared_memory_files=len(shm),
               stopped_s=round(stopped_s, 1), stream_in_flight=ends[0],
               processes_left=0, shared_memory_left=0, sockets_left=0)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)
