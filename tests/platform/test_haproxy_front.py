"""The app behind Serve's HAProxy front (``RAY_SERVE_ENABLE_HA_PROXY=1``): HAProxy forwards
to the LLM replica's own HTTP server (direct ingress), with no Python proxy and no Ray
call on the way. The same app code as behind the Python proxy: a team's chat streams,
its answers carry the replica's id, the app's and Serve's errors are OpenAI-shaped.

Its own Ray cluster in a subprocess (Ray reads the mode when its processes start), with
one CPU replica: about one engine start-up. HAProxy listens on every interface for its
stats and metrics and the replica on its own port; the ports here are free ones, and the
cluster stops with the test.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from granikv_platform.front import CALLBACK, PROXY_CALLBACK_ENV
from granikv_platform.names import REPLICA_HEADER
from tests.conftest import REPO, app_args, auth, free_port
from tests.platform.test_header_limits import GET, flood, refused, status
from tests.platform.test_header_limits import request as raw_request
from tests.reliability.figures import record

pytestmark = [pytest.mark.ray, pytest.mark.vllm]
NAME = "gkvha"
HEADER_LIMIT = 8192

SERVE = """
import json, sys
import ray
from ray import serve
from granikv_platform.builder import build_app
args, port = json.loads(sys.argv[1]), int(sys.argv[2])
ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, namespace="gkvha")
serve.start(http_options={"host": "127.0.0.1", "port": port})
serve.run(build_app(args), name=args["name"], route_prefix="/")
print("READY", flush=True)
sys.stdin.read()  # until the test closes it
serve.shutdown()
ray.shutdown()
"""


@pytest.fixture(scope="module")
def haproxy_app() -> Iterator[tuple[str, psutil.Process]]:
    tmp = Path(tempfile.mkdtemp(prefix="gkvh-", dir="/tmp"))  # short socket paths
    args = app_args(tmp)
    args.update(name=NAME, team_routers=[], services=[])
    args["registry"]["name"] = f"{NAME}-registry-{os.getpid()}"
    args["replicas"].update(num_replicas=1, num_cpus=0.5)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_TMPDIR")}
    env.update({"RAY_TMPDIR": str(tmp), "RAY_SERVE_ENABLE_HA_PROXY": "1",
                PROXY_CALLBACK_ENV: CALLBACK,
                # under HAProxy's own bound (about 15 KiB), so that the replica's applies
                "GRANIKV_MAX_HEADER_BYTES": str(HEADER_LIMIT),
                "RAY_SERVE_HAPROXY_STATS_PORT": str(free_port()),
                "RAY_SERVE_HAPROXY_METRICS_PORT": str(free_port()),
                "RAY_SERVE_FALLBACK_PROXY_HTTP_PORT": str(free_port()),
                "RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S": "1",
                # vLLM's CPU build binds each engine's worker to the first core, where the
                # session app's two workers poll: unbound, this one gets the other core.
                "VLLM_CPU_OMP_THREADS_BIND": "nobind"})
    proc = subprocess.Popen([sys.executable, "-c", SERVE, json.dumps(args), str(port)],
                            cwd=REPO, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(ln) for ln in proc.stdout or ()],
                     daemon=True).start()
    seen: list[str] = []
    try:
        deadline = time.monotonic() + 600
        while not seen or seen[-1].strip() != "READY":
            assert proc.poll() is None, "".join(seen[-40:])
            assert time.monotonic() < deadline, "".join(seen[-40:])
            try:
                seen.append(lines.get(timeout=1))
            except queue.Empty:
                continue
        yield f"http://127.0.0.1:{port}", psutil.Process(proc.pid)
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(timeout=180)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)


def haproxy_listening(root: psutil.Process) -> set[int]:
    """The ports the cluster's haproxy processes listen on."""
    ports: set[int] = set()
    for p in root.children(recursive=True):
        try:
            if p.name() == "haproxy" or "haproxy" in " ".join(p.cmdline()[:1]):
                ports |= {c.laddr.port for c in p.net_connections("tcp")
                          if c.status == psutil.CONN_LISTEN}
        except psutil.Error:
            continue
    return ports


def test_haproxy_is_the_front(haproxy_app: tuple[str, psutil.Process]) -> None:
    url, root = haproxy_app
    assert int(url.rsplit(":", 1)[1]) in haproxy_listening(root)


def test_a_team_chat_streams_through_haproxy(haproxy_app: tuple[str, Any]) -> None:
    url, _ = haproxy_app
    body = {"model": "tiny-llama", "max_tokens": 8, "stream": True,
            "messages": [{"role": "user", "content": "hello"}]}
    with httpx.Client(base_url=url, headers=auth("red"), timeout=120) as c:
        assert c.get("/readyz").json()["replicas"] == 1
        with c.stream("POST", "/teams/red/v1/chat/completions", json=body,
                      headers={"x-request-id": "ha-1"}) as s:
            assert s.status_code == 200, s.read()
            assert s.headers["x-request-id"] == "ha-1" and s.headers[REPLICA_HEADER]
            events = [ln for ln in s.iter_lines() if ln.startswith("data: ")]
        assert events[-1] == "data: [DONE]" and len(events) >= 3, events
        chunks = [json.loads(e[6:]) for e in events[:-1]]
        assert chunks[-1]["choices"][0]["finish_reason"] == "length"
        r = c.post("/v1/completions", json={"model": "tiny-llama", "prompt": "a",
                                            "max_tokens": 2})
        assert r.status_code == 200 and r.json()["choices"][0]["text"], r.text


def test_errors_are_openai_shaped_through_haproxy(haproxy_app: tuple[str, Any]) -> None:
    url, _ = haproxy_app
    r = httpx.get(f"{url}/v1/models", timeout=60)  # the app's own: no key
    assert r.status_code == 401 and r.json()["error"]["request_id"], r.text
    with httpx.Client(base_url=url, headers=auth("red"), timeout=60) as c:
        r = c.get("/v1/no-such-route")
        assert r.status_code == 404 and r.json()["error"]["code"] == 404, r.text
        r = c.post("/teams/blue/v1/chat/completions", json={})  # another team's route
        assert r.status_code == 403 and r.json()["error"]["code"] == 403, r.text


def test_oversized_headers_are_refused_at_once_through_haproxy(
        haproxy_app: tuple[str, Any]) -> None:
    """HAProxy refuses a header section over its buffer (``tune.bufsize`` 16384 less its
    rewrite reserve) or over 101 fields with its own 400, at once; one under HAProxy's
    bounds and over the front's limits is the replica's server's 431."""
    url, _ = haproxy_app
    port = int(url.rsplit(":", 1)[1])
    big = flood(port, 100)
    record("big_headers_haproxy", header_mb=100, status=status(big.answer),
           refused_after_s=round(big.answered_s, 3), sent_mb_before_answer=round(big.sent_mb, 1))
    assert big.answered_s < 2.0 and big.sent_mb < 100, big
    assert status(big.answer) == 400 and b"connection: close" in big.answer.lower()
    many = b"".join(b"x-%d: v\r\n" % i for i in range(2000))
    assert status(raw_request(port, GET + many)) == 400
    answer = raw_request(port, GET + b"x-pad: " + b"p" * (HEADER_LIMIT + 100) + b"\r\n")
    refused(answer, "GRANIKV_MAX_HEADER_BYTES", close=False)  # HAProxy's connection to
    # the client is its own: the replica's server closes the one from HAProxy
    assert status(raw_request(port, GET + b"x-pad: " + b"p" * (HEADER_LIMIT // 2) + b"\r\n")) \
        == 401  # under both: the app's own answer (no key)
