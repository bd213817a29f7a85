"""The listening sockets of ``make run``'s cluster are the ones platform/README.md lists.

``granikv run`` is started as a user starts it (a subprocess with its own Ray cluster,
Ray's token auth on, as by default), and once it serves, every listening TCP socket of
its process tree (the command, GCS, raylet, Ray's agents, Serve's actors, the vLLM
engine's processes) is listed. Each must belong to a process of the README's table
("Sockets of a local run") and listen at that row's address (127.0.0.1 for all of them:
no socket on another interface), and each row must be seen. The guards the table names
are tried: Serve's HTTP port answers 401 without an API key; the GCS and every
replica's inter-deployment gRPC server refuse a call without Ray's token
(UNAUTHENTICATED). Without the repository's loopback hooks (platform's ``loopback.py``
and the engine plugin's ``loopback_store.py``) the replicas' gRPC servers and the vLLM
worker's TCPStore listen on every interface (``::``) and this fails. A command with
``RAY_AUTH_MODE=disabled`` is refused unless it passes ``--allow-ray-auth-disabled``.
"""

from __future__ import annotations

import fnmatch
import ipaddress
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import grpc
import httpx
import psutil
import pytest

from tests.conftest import REPO, free_port, wait_until

README = REPO / "platform" / "README.md"
SECTION = "Sockets of a local run"
SERVING = "to stop"  # the last line `granikv run` prints before it waits
SERVE_GRPC = "/ray.serve.ASGIService/HandleRequest"  # a replica's inter-deployment server
GCS_GRPC = "/ray.rpc.InternalKVGcsService/InternalKVKeys"


class Listener(NamedTuple):
    process: str  # psutil's name: gcs_server, ray::ServeReplica:granikv:granikv-llm, ...
    ip: str
    port: int


class Row(NamedTuple):
    processes: tuple[str, ...]  # fnmatch patterns of process names
    address: str


def documented_rows(text: str) -> list[Row]:
    """The rows of the README's socket table: the processes (backticked, in the first
    column) and the address (the second column's first backticked value)."""
    section = text.split(f"\n## {SECTION}\n", 1)[1].split("\n## ", 1)[0]
    table = re.search(r"^\|.*?(?=^[^|])", section, re.S | re.M)
    assert table, f"no table under {SECTION!r}"
    rows = []
    for line in table.group(0).splitlines()[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        names = tuple(re.findall(r"`([^`]+)`", cells[0]))
        address = re.findall(r"`([^`]+)`", cells[1])
        assert names and address, line
        rows.append(Row(names, address[0]))
    return rows


def listeners(root: psutil.Process) -> list[Listener]:
    """Every listening TCP socket (IPv4 and IPv6) of ``root`` and its descendants."""
    out = []
    for p in [root, *root.children(recursive=True)]:
        try:
            name = p.name()
            out += [Listener(name, c.laddr.ip, c.laddr.port) for c in p.net_connections("inet")
                    if c.status == psutil.CONN_LISTEN]
        except psutil.Error:
            continue
    return out


def on_address(ip: str, documented: str) -> bool:
    """``ip`` (as the kernel reports it: ``::ffff:127.0.0.1`` for an IPv4 socket on a
    dual-stack one) is the documented address."""
    addr = ipaddress.ip_address(ip)
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped:
        addr = addr.ipv4_mapped
    return addr == ipaddress.ip_address(documented)


def row_of(process: str, rows: list[Row]) -> Row | None:
    return next((r for r in rows if any(fnmatch.fnmatchcase(process, pat)
                                        for pat in r.processes)), None)


def grpc_status(port: int, method: str) -> grpc.StatusCode:
    """The status of a call without Ray's token (an empty request) to 127.0.0.1:port."""
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        try:
            channel.unary_unary(method)(b"", timeout=10)
        except grpc.RpcError as e:
            return e.code()  # type: ignore[no-any-return]  # an RpcError is also a Call
    return grpc.StatusCode.OK


@pytest.fixture
def serving() -> Iterator[tuple[psutil.Process, int]]:
    """`granikv run` serving, with Ray's token auth (a token of its own), and its HTTP
    port; stopped with SIGTERM afterwards."""
    tmp = Path(tempfile.mkdtemp(prefix="gkvn-", dir="/tmp"))  # short socket paths
    env = {k: v for k, v in os.environ.items() if k not in (
        "RAY_ADDRESS", "GRANIKV_CONFIG", "GRANIKV_API_KEYS_FILE", "RAY_AUTH_MODE")}
    env.update(RAY_AUTH_TOKEN=secrets.token_hex(32), RAY_USAGE_STATS_ENABLED="0",
               RAY_TMPDIR=str(tmp), TMPDIR=str(tmp), PYTHONUNBUFFERED="1")
    log, port = tmp / "out.txt", free_port()
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "granikv_agents.cli", "run", "--port", str(port),
             "--max-tokens", "2"], cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: SERVING in log.read_text() or proc.poll() is not None, 480,
                   "`granikv run` to serve", every_s=1.0)
        assert proc.poll() is None, log.read_text()[-3000:]
        yield psutil.Process(proc.pid), port
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 0, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.mark.ray
@pytest.mark.vllm
def test_make_runs_sockets_are_the_documented_ones_on_loopback(
        serving: tuple[psutil.Process, int]) -> None:
    root, port = serving
    rows = documented_rows(README.read_text())
    found = listeners(root)
    undocumented = [s for s in found if row_of(s.process, rows) is None]
    assert not undocumented, f"listening, not in {README.name}: {undocumented}"
    elsewhere = [s for s in found if not on_address(s.ip, row_of(s.process, rows).address)]  # type: ignore[union-attr]
    assert not elsewhere, f"listening on another address than documented: {elsewhere}"
    unseen = [r for r in rows if not any(row_of(s.process, [r]) for s in found)]
    assert not unseen, f"documented, not listening: {unseen}"
    loopback = sum(ipaddress.ip_address(s.ip.removeprefix("::ffff:")).is_loopback
                   for s in found)
    print(f"{len(found)} listening sockets: {loopback} on loopback, "
          f"{len(found) - loopback} on other interfaces")

    # the guards: an API key for HTTP, Ray's token for Ray's gRPC servers
    assert httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=30).status_code == 401
    (gcs,) = {s.port for s in found if s.process == "gcs_server"}
    assert grpc_status(gcs, GCS_GRPC) == grpc.StatusCode.UNAUTHENTICATED
    replicas: dict[str, list[grpc.StatusCode]] = {}
    for s in found:
        if s.process.startswith("ray::ServeReplica"):
            replicas.setdefault(s.process, []).append(grpc_status(s.port, SERVE_GRPC))
    assert len(replicas) >= 2, found  # the LLM replica and the agents'
    for name, codes in replicas.items():  # each: its worker's server and Serve's
        assert grpc.StatusCode.UNAUTHENTICATED in codes, (name, codes)
        assert grpc.StatusCode.OK not in codes, (name, codes)


def test_a_local_run_refuses_ray_without_auth_unless_told() -> None:
    """RAY_AUTH_MODE=disabled: `granikv run` says why and what to do, and starts nothing
    (no Ray folder under its RAY_TMPDIR)."""
    tmp = Path(tempfile.mkdtemp(prefix="gkvn-", dir="/tmp"))
    try:
        env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
        env.update(RAY_TMPDIR=str(tmp), RAY_AUTH_MODE="disabled")
        proc = subprocess.run([sys.executable, "-m", "granikv_agents.cli", "run", "--once"],
                              cwd=tmp, env=env, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
        said = " ".join(proc.stderr.replace("│", " ").split())
        assert "RAY_AUTH_MODE=disabled" in said and "--allow-ray-auth-disabled" in said, said
        assert not list(tmp.iterdir())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
